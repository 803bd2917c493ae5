"""The figures of `jaxrl-async report` (report.py): interval estimates of each aggregate
per group, and the groups' performance profiles, on the scale the report compares groups
on (its `score`: normalised scores, or final returns)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxrl_async.analysis import stats
from jaxrl_async.analysis.plot import _pyplot, _save
from jaxrl_async.analysis.report import TITLES, compared

PANEL_WIDTH = 2.8  # inches per aggregate's panel, the group names' width added


def _aggregated(report: dict) -> list[tuple[str, dict, dict]]:
    """(name, aggregates, values per task) of the groups that have aggregates (a group
    where no episode finished has none)."""
    out = []
    for g in report["groups"]:
        block, values = compared(g, report["score"])
        if block.get("iqm") is not None:
            out.append((g["name"], block, values))
    return out


def _scale(report: dict) -> str:
    return "normalised score" if report["score"] == "normalized_score" else "final return"


def plot_intervals(report: dict, out: str | Path) -> Path:
    """One panel per aggregate: each group's point estimate and confidence interval."""
    plt = _pyplot()
    groups = _aggregated(report)
    keys = [k for k in TITLES if groups and k in groups[0][1]]
    panels, rows = max(len(keys), 1), max(len(groups), 1)
    # Constrained layout makes room for the titles, the group names and the shared label
    # (tight_layout, with a figure-level supxlabel, gave up on a short figure with a
    # warning); the figure is widened below to the longest group name.
    fig, axes = plt.subplots(
        1, panels, figsize=(PANEL_WIDTH * panels, 1.3 + 0.45 * rows), layout="constrained"
    )
    axes = np.atleast_1d(axes)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, key in zip(axes, keys):
        for row, (_, block, _) in enumerate(groups):
            low, high = block[f"{key}_ci"]
            color = colors[row % len(colors)]
            ax.barh(row, high - low, left=low, height=0.6, color=color, alpha=0.5)
            ax.plot([block[key]] * 2, [row - 0.3, row + 0.3], color="black", linewidth=1.5)
        ax.use_sticky_edges = False  # a margin around the bars, not an interval cut at the frame
        ax.margins(x=0.08)
        ax.xaxis.set_major_locator(plt.MaxNLocator(4))
        ax.set_title(TITLES[key])
        ax.set_yticks(range(len(groups)))
        ax.set_yticklabels([name for name, _, _ in groups] if ax is axes[0] else [])
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    fig.supxlabel(f"{_scale(report)} ({report['confidence']:.0%} stratified-bootstrap CI)")
    renderer = fig.canvas.get_renderer()
    names = max((t.get_window_extent(renderer).width for t in axes[0].get_yticklabels()), default=0)
    fig.set_figwidth(PANEL_WIDTH * panels + names / fig.dpi + 0.4)
    return _save(fig, out)


def plot_profile(report: dict, out: str | Path, points: int = 101) -> Path:
    """Each group's performance profile: the fraction of runs scoring above tau."""
    plt = _pyplot()
    groups = _aggregated(report)
    scores = [s for _, _, values in groups for task in values.values() for s in task]
    low, high = (min(scores), max(scores)) if scores else (0.0, 1.0)
    pad = 0.05 * (high - low or 1.0)
    taus = np.linspace(low - pad, high + pad, points)
    # No layout engine: the legend is outside the axes, whatever the names' length, and
    # _save's tight bounding box takes it in (a layout engine could only shrink the axes).
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, _, values in groups:
        ax.plot(taus, stats.performance_profile(list(values.values()), taus), label=name)
    ax.set_xlabel(f"{_scale(report)} (tau)")
    ax.set_ylabel("fraction of runs with score > tau")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)
    return _save(fig, out)
