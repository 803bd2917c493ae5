"""`jaxrl-async report`'s files: the report (`report.py`) of the runs under some directories
written to OUT as report.json, report.md and its figures (`report_plot.py`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from jaxrl_async.analysis.report import (
    FIGURES,
    build_report,
    find_runs,
    format_markdown,
    group_runs,
)
from jaxrl_async.analysis.report_plot import plot_intervals, plot_profile


def write_report(
    paths: Sequence[str | Path],
    group_by: str | None = None,
    out: str | Path = "report",
    seed: int = 0,
) -> Path:
    """Read, group and aggregate the runs under `paths`; write OUT/report.json, report.md,
    intervals.png and profile.png. Returns OUT."""
    groups = group_runs(find_runs(paths), group_by)
    report = build_report(groups, seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figures = [
        plot_intervals(report, out / FIGURES[0]),
        plot_profile(report, out / FIGURES[1]),
    ]
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.md").write_text(format_markdown(report, [f.name for f in figures]))
    return out
