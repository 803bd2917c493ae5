"""A sweep's results table: per point, the final return over its seeds (mean, std, IQM with
its bootstrap interval, each seed's) and the area under its learning curve, the best
point, and the Markdown table `jaxrl-async sweep` prints and writes to sweep.json."""

from __future__ import annotations

import math

import numpy as np

from jaxrl_async.analysis import stats


def short_value(value) -> str:
    """A swept value as a point's name and the table show it (lists joined by x)."""
    if isinstance(value, list):
        return "x".join(short_value(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def auc(records: list[dict]) -> float:
    """The mean of the return curve over env steps (trapezoid rule over the log points
    with a finished episode): the area under the curve per env step."""
    points = [
        (r["env_steps"], r["episode_return"])
        for r in records
        if r.get("episode_return") is not None and math.isfinite(r["episode_return"])
    ]
    if not points:
        return math.nan
    if len(points) == 1:
        return float(points[0][1])
    x, y = np.asarray(points, np.float64).T
    return float(np.sum((y[1:] + y[:-1]) / 2 * np.diff(x)) / (x[-1] - x[0]))


def seed_finals(records: list[dict], num_seeds: int) -> list[float]:
    """Each seed's last finite episode return (NaN where none finished)."""
    keys = (
        ["episode_return"]
        if num_seeds == 1
        else [f"episode_return/seed{k}" for k in range(num_seeds)]
    )
    finals = []
    for key in keys:
        values = [r[key] for r in records if r.get(key) is not None and math.isfinite(r[key])]
        finals.append(float(values[-1]) if values else math.nan)
    return finals


def point_summary(
    overrides: dict, records: list[dict], group_summary: dict, seeds: int, runs: int
) -> dict:
    """A point's summary.json: its own returns, the group's timings, its share of the SPS."""
    finals = seed_finals(records, seeds)
    finite = [f for f in finals if math.isfinite(f)]
    return {
        **group_summary,
        "num_seeds": seeds,
        "overrides": overrides,
        "sps": group_summary["sps"] * seeds / runs,
        "final_return": float(np.mean(finite)) if finite else None,
        "final_return_seeds": [None if math.isnan(f) else f for f in finals] if seeds > 1 else None,
    }


def table_row(overrides: dict, records: list[dict], seeds: int, run_dir: str) -> dict:
    """A point's row: its seeds' final returns, their mean, std (population) and IQM with
    the IQM's bootstrap interval (`stats.py`, as `jaxrl-async report` gives it)."""
    finals = seed_finals(records, seeds)
    finite = np.asarray(stats.finite(finals))
    iqm, ci = stats.interval([finite], stats.iqm) if finite.size else (None, None)
    return {
        "overrides": overrides,
        "final_return_mean": float(finite.mean()) if finite.size else None,
        "final_return_std": float(finite.std()) if finite.size else None,
        "final_return_iqm": iqm,
        "final_return_iqm_ci": None if ci is None else list(ci),
        "final_return_seeds": [None if math.isnan(f) else f for f in finals],
        "auc": _none_if_nan(auc(records)),
        "run_dir": run_dir,
    }


def _none_if_nan(x: float):
    return None if x is None or not math.isfinite(x) else x


def best_point(rows: list[dict]) -> int | None:
    means = [
        (-math.inf if r["final_return_mean"] is None else r["final_return_mean"], -i)
        for i, r in enumerate(rows)
    ]
    return -max(means)[1] if means and max(means)[0] > -math.inf else None


def format_table(rows: list[dict], best: int | None) -> str:
    """The printed table: one line per point, the best marked."""
    keys = list(rows[0]["overrides"]) if rows else []
    head = [k.rsplit(".", 1)[-1] for k in keys] + ["final return", "IQM [95% CI]", "AUC"]
    body = []
    for i, r in enumerate(rows):
        mean, std = r["final_return_mean"], r["final_return_std"]
        ret = "-" if mean is None else f"{mean:.1f} ± {std:.1f}"
        iqm, ci = r.get("final_return_iqm"), r.get("final_return_iqm_ci")
        interval = "-" if iqm is None or ci is None else f"{iqm:.1f} [{ci[0]:.1f}, {ci[1]:.1f}]"
        area = "-" if r["auc"] is None else f"{r['auc']:.1f}"
        body.append(
            [short_value(r["overrides"][k]) for k in keys]
            + [ret, interval, area]
            + (["<- best"] if i == best else [])
        )
    widths = [max(len(str(row[c])) for row in [head, *body]) for c in range(len(head))]
    lines = ["  ".join(str(c).rjust(w) for c, w in zip(head, widths))]
    lines += [
        "  ".join(str(c).rjust(w) for c, w in zip(row, widths))
        + ("  " + row[-1] if len(row) > len(head) else "")
        for row in body
    ]
    return "\n".join(lines)
