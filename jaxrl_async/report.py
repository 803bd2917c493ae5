"""`jaxrl-async report`: the final returns of runs and sweeps, grouped and aggregated with
stratified-bootstrap confidence intervals (`stats.py`), written as report.json, report.md
and two figures (`report_plot.py`).

A run's final return is each seed's last finite episode return in metrics.jsonl, the
window summary.json's `final_return` takes. Runs are grouped by config name, by the value
of a config key (`--group-by agent.name`), or, for a sweep directory, by grid point; the
task of a run is its `env.name`. Where every task of the report has reference returns
(`reference_scores.py`), groups are compared on normalised scores, with the optimality
gap; otherwise on raw returns, which needs each group to hold a single task.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from jaxrl_async import stats
from jaxrl_async.errors import UserError
from jaxrl_async.plot import is_sweep_dir, load_run, load_sweep
from jaxrl_async.reference_scores import reference
from jaxrl_async.sweep_table import short_value


@dataclasses.dataclass(frozen=True)
class RunFinals:
    """One run directory's final returns and what it is."""

    source: str  # the run directory
    label: str  # its group by default: the config name, or the sweep point
    task: str  # env.name
    config: dict  # config.yaml flattened to section.key (empty without one)
    finals: list[float]  # each seed's final return (NaN where no episode finished)


def _last_finite(row: np.ndarray) -> float:
    finite = row[np.isfinite(row)]
    return float(finite[-1]) if finite.size else math.nan


def read_run(run_dir: Path, label: str | None = None) -> RunFinals:
    run = load_run(run_dir)
    rows = run["seed_returns"] if run["seed_returns"] is not None else [run["episode_return"]]
    config = run["config"] or {}
    return RunFinals(
        source=str(run_dir),
        label=label or str(config.get("name", run["name"])),
        task=str(config.get("env.name", "unknown")),
        config=config,
        finals=[_last_finite(np.asarray(row)) for row in rows],
    )


def _sweep_runs(sweep_dir: Path) -> list[RunFinals]:
    runs = []
    for point in load_sweep(sweep_dir)["points"]:
        values = point["overrides"].items()
        label = ", ".join(f"{k.rsplit('.', 1)[-1]}={short_value(v)}" for k, v in values)
        runs.append(read_run(point["run_dir"], label or point["run_dir"].name))
    return runs


def find_runs(paths: Sequence[str | Path]) -> list[RunFinals]:
    """The runs under `paths`: each a run directory, a sweep directory, or a directory
    holding either (searched in name order)."""
    runs: list[RunFinals] = []
    for path in map(Path, paths):
        if not path.is_dir():
            raise UserError(f"{path} is not a directory")
        found = _runs_under(path)
        if not found:
            raise UserError(f"{path} holds no run directory (metrics.jsonl) or sweep (sweep.json)")
        runs += found
    return runs


def _runs_under(path: Path) -> list[RunFinals]:
    if is_sweep_dir(path):
        return _sweep_runs(path)
    if (path / "metrics.jsonl").is_file():
        return [read_run(path)]
    return [run for child in sorted(path.iterdir()) if child.is_dir() for run in _runs_under(child)]


def group_runs(runs: list[RunFinals], group_by: str | None) -> dict[str, list[RunFinals]]:
    """Runs by group label, in the order first seen."""
    groups: dict[str, list[RunFinals]] = {}
    for run in runs:
        if group_by is None:
            label = run.label
        elif group_by in run.config:
            label = f"{group_by}={short_value(run.config[group_by])}"
        else:
            raise UserError(f"--group-by {group_by}: {run.source} has no such config key")
        groups.setdefault(label, []).append(run)
    return groups


def _normalizer(runs: list[RunFinals]):
    """A run's scores from its returns: normalised where every task has reference
    returns (and None where not)."""
    refs = {}
    for run in runs:
        kwargs = {k: v for k, v in run.config.items() if k.startswith("env.kwargs.")}
        ref = reference(run.task, kwargs)
        if ref is None:
            return None
        refs[run.source] = ref
    return lambda run, returns: stats.normalize(
        returns, refs[run.source].random, refs[run.source].high
    )


def _strata(runs: list[RunFinals], normalizer) -> dict[str, list[float]]:
    """Per task, the scores of every seed of every run of it that finished an episode."""
    tasks: dict[str, list[float]] = {}
    for run in runs:
        finals = np.asarray(stats.finite(run.finals))
        scores = finals if normalizer is None else normalizer(run, finals)
        tasks.setdefault(run.task, []).extend(map(float, scores))
    return {task: scores for task, scores in tasks.items() if scores}


def _group_entry(name: str, runs: list[RunFinals], normalizer, seed: int) -> dict:
    finals = [f for run in runs for f in run.finals]
    strata = _strata(runs, normalizer)
    entry = {
        "name": name,
        "runs": len(finals),
        "sources": [run.source for run in runs],
        "tasks": sorted({run.task for run in runs}),
        "final_returns": [None if math.isnan(f) else f for f in finals],
        # per task, the scores aggregated: normalised returns or returns (report["score"])
        "scores": strata,
    }
    if strata:
        entry.update(stats.describe(list(strata.values()), gap=normalizer is not None, seed=seed))
    return entry


def build_report(groups: dict[str, list[RunFinals]], seed: int = 0) -> dict:
    """The report: every group's aggregates, and P(X > Y) for every pair of groups over
    the tasks both hold."""
    everything = [run for runs in groups.values() for run in runs]
    normalizer = _normalizer(everything)
    if normalizer is None:
        mixed = [name for name, runs in groups.items() if len({r.task for r in runs}) > 1]
        if mixed:
            raise UserError(
                f"group {mixed[0]!r} mixes envs without reference returns "
                "(reference_scores.py); group so that each group holds one env"
            )
    entries = [_group_entry(name, runs, normalizer, seed) for name, runs in groups.items()]
    strata = {entry["name"]: entry["scores"] for entry in entries}
    improvement = {}
    for a, b in itertools.combinations(groups, 2):
        shared = [t for t in strata[a] if t in strata[b]]
        if not shared:
            continue
        value, (low, high) = stats.probability_of_improvement(
            [strata[a][t] for t in shared], [strata[b][t] for t in shared], seed=seed
        )
        improvement[f"{a} > {b}"] = {"value": value, "ci": [low, high], "tasks": shared}
    return {
        "score": "return" if normalizer is None else "normalized",
        "confidence": stats.CONFIDENCE,
        "resamples": stats.RESAMPLES,
        "seed": seed,
        "groups": entries,
        "probability_of_improvement": improvement,
    }


def _num(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def _cell(value: float | None, ci: Sequence[float] = ()) -> str:
    """A value and its interval: `485 [475, 500]`."""
    if value is None:
        return "-"
    return f"{_num(value)} [{_num(ci[0])}, {_num(ci[1])}]"


def format_markdown(report: dict, figures: Sequence[str] = ()) -> str:
    """report.md: the groups' table, the pairs' table, the figures."""
    score = "normalised score" if report["score"] == "normalized" else "final return"
    keys = ["iqm", "mean", "median"] + (
        ["optimality_gap"] if report["score"] == "normalized" else []
    )
    titles = {"iqm": "IQM", "mean": "mean", "median": "median", "optimality_gap": "optimality gap"}
    lines = [
        "# Report",
        "",
        f"Aggregates of each group's {score}s over runs and tasks, with "
        f"{report['confidence']:.0%} stratified-bootstrap confidence intervals "
        f"({report['resamples']} resamples, seed {report['seed']}).",
        "",
        "| group | runs | tasks | " + " | ".join(titles[k] for k in keys) + " |",
        "| --- | ---: | --- | " + " | ".join("---:" for _ in keys) + " |",
    ]
    for g in report["groups"]:
        cells = [_cell(g.get(k), g.get(f"{k}_ci", ())) for k in keys]
        lines.append(
            f"| {g['name']} | {g['runs']} | {', '.join(g['tasks'])} | " + " | ".join(cells) + " |"
        )
    if report["probability_of_improvement"]:
        lines += ["", "| P(X > Y) | probability [CI] |", "| --- | ---: |"]
        for pair, p in report["probability_of_improvement"].items():
            lines.append(f"| {pair} | {_cell(p['value'], p['ci'])} |")
    lines += [""] + [f"![{Path(f).stem}]({f})" for f in figures]
    return "\n".join(lines) + "\n"


def write_report(
    paths: Sequence[str | Path],
    group_by: str | None = None,
    out: str | Path = "report",
    seed: int = 0,
) -> Path:
    """Read, group and aggregate the runs under `paths`; write OUT/report.json, report.md,
    intervals.png and profile.png. Returns OUT."""
    from jaxrl_async.report_plot import plot_intervals, plot_profile

    groups = group_runs(find_runs(paths), group_by)
    report = build_report(groups, seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figures = [
        plot_intervals(report, out / "intervals.png"),
        plot_profile(report, out / "profile.png"),
    ]
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.md").write_text(format_markdown(report, [f.name for f in figures]))
    return out
