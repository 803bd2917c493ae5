"""The figures of `jaxrl-async report` (report.py): interval estimates of each aggregate
per group, and the groups' performance profiles."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxrl_async import stats
from jaxrl_async.plot import _pyplot, _save

TITLES = {"iqm": "IQM", "mean": "mean", "median": "median", "optimality_gap": "optimality gap"}


def _aggregated(report: dict) -> list[dict]:
    """The groups that have aggregates (a group where no episode finished has none)."""
    return [g for g in report["groups"] if g.get("iqm") is not None]


def plot_intervals(report: dict, out: str | Path) -> Path:
    """One panel per aggregate: each group's point estimate and confidence interval."""
    plt = _pyplot()
    groups = _aggregated(report)
    keys = [k for k in TITLES if groups and k in groups[0]]
    fig, axes = plt.subplots(
        1, max(len(keys), 1), figsize=(3.2 * max(len(keys), 1), 0.5 + 0.45 * max(len(groups), 1))
    )
    axes = np.atleast_1d(axes)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, key in zip(axes, keys):
        for row, g in enumerate(groups):
            low, high = g[f"{key}_ci"]
            color = colors[row % len(colors)]
            ax.barh(row, high - low, left=low, height=0.6, color=color, alpha=0.5)
            ax.plot([g[key]] * 2, [row - 0.3, row + 0.3], color="black", linewidth=1.5)
        ax.use_sticky_edges = False  # a margin around the bars, not an interval cut at the frame
        ax.margins(x=0.08)
        ax.xaxis.set_major_locator(plt.MaxNLocator(4))
        ax.set_title(TITLES[key])
        ax.set_yticks(range(len(groups)))
        ax.set_yticklabels([g["name"] for g in groups] if ax is axes[0] else [])
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    score = "normalised score" if report["score"] == "normalized" else "final return"
    fig.supxlabel(f"{score} ({report['confidence']:.0%} stratified-bootstrap CI)")
    fig.tight_layout()
    return _save(fig, out)


def plot_profile(report: dict, out: str | Path, points: int = 101) -> Path:
    """Each group's performance profile: the fraction of runs scoring above tau."""
    plt = _pyplot()
    groups = _aggregated(report)
    scores = [s for g in groups for task in g["scores"].values() for s in task]
    low, high = (min(scores), max(scores)) if scores else (0.0, 1.0)
    pad = 0.05 * (high - low or 1.0)
    taus = np.linspace(low - pad, high + pad, points)
    fig, ax = plt.subplots(figsize=(6, 4))
    for g in groups:
        ax.plot(taus, stats.performance_profile(list(g["scores"].values()), taus), label=g["name"])
    score = "normalised score" if report["score"] == "normalized" else "final return"
    ax.set_xlabel(f"{score} (tau)")
    ax.set_ylabel("fraction of runs with score > tau")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    return _save(fig, out)
