"""`jaxrl-async report`: the final returns of runs and sweeps, grouped and aggregated with
stratified-bootstrap confidence intervals (`stats.py`), written as report.json, report.md
and two figures (`report_plot.py`).

A run's final return is each seed's last finite episode return in metrics.jsonl, the
window summary.json's `final_return` takes; the task of a run is its `env.name`.

**Groups.** By default a group is one experiment: runs whose resolved configs
(RUN_DIR/config.yaml, flattened to `section.key`) are equal once the keys that change
neither what is trained nor the final return read from it are left out (IGNORED_KEYS,
IGNORED_SECTIONS):

- `name`, the config file's name: a label, not a setting (`ppo_cartpole pipeline.lag=1`
  is the experiment `ppo_cartpole_async` is);
- `train.seed`, `train.num_seeds` and `train.prng`: which random draws and how many, the
  samples of an experiment rather than the experiment (a 5-seed and a 3-seed run of one
  config are one group of 8);
- how the same computation is run: `train.progress`, `train.compile_cache`,
  `train.deterministic`, `pipeline.placement` (both placements end in the same state),
  `pipeline.unroll` (at most float rounding) and `env.stall_seconds` (a host env's
  watchdog);
- the sections `checkpoint`, `eval` (evaluation runs on envs of its own; the final return
  is a training one), `logger` and `distributed`;
- `replay.*` of an on-policy agent, which has no replay.

A key a config.yaml lacks (written before the key existed) counts as its default.

Every other key separates groups: the rest of `env`, all of `agent`, the rest of `pipeline`
(`pipeline.devices` and `actor_devices` too: off-policy runs sample a replay shard per
device), `train.total_steps`, `train.log_every` (the window of the final return; it may
also shorten a run to whole host calls) and `train.nan_policy`. A group is named by the
keys whose values differ between the groups (`agent.learning_rate=0`, several joined by
", "; for a sweep, its swept keys), after its config name where the groups' config names
differ (`ppo_cartpole (agent.learning_rate=0)`, or `ppo_cartpole_async` alone when it is
that name's only group); when more than three keys differ, by the fewest of them that tell
the groups apart (`env.name` and `agent.name` first) and the count of the others. One
group is named by its config name. Runs without config.yaml group by config name (a sweep
point's: its overrides), unchecked.

`--group-by KEY` groups by the value of one config key instead (`pipeline.lag=1`); a group
may then span tasks (each a stratum of its aggregates), but runs of one task in one group
should be one experiment: where their configs differ in more than the keys above, the
report warns in one line naming the keys (report.json's `warnings`, report.md, stderr).
It warns too where a group holds one experiment's seed twice (a rerun of a seed repeats
its draws: not an independent sample).

**Scales.** Each group has its raw final returns per task (`final_return`: returns of
different envs do not aggregate), and, where every task of the report has reference
returns (`reference_scores.py`), its normalised scores aggregated over tasks with the
optimality gap (`normalized_score`). The groups are compared (the report's `score`: P(X >
Y), the figures, report.md's first table) on normalised scores where there are some, else
on final returns, which needs each group to hold a single task.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxrl_async.analysis import stats
from jaxrl_async.analysis.plot import _flatten, is_sweep_dir, load_run, load_sweep
from jaxrl_async.analysis.reference_scores import reference
from jaxrl_async.analysis.sweep_table import short_value
from jaxrl_async.config.agents import AGENT_CONFIGS
from jaxrl_async.errors import UserError

# Config keys that change neither what is trained nor the final return measured (the
# module's docstring says why each): runs that differ only here are one experiment.
IGNORED_KEYS = frozenset(
    {
        "name",
        "train.seed",
        "train.num_seeds",
        "train.prng",
        "train.progress",
        "train.compile_cache",
        "train.deterministic",
        "pipeline.placement",
        "pipeline.unroll",
        "env.stall_seconds",
    }
)
IGNORED_SECTIONS = ("checkpoint.", "eval.", "logger.", "distributed.")
# A group's name shows at most this many differing keys (else the fewest that tell apart).
MAX_NAME_KEYS = 3
# Keys named first: what most changes an experiment.
FIRST_KEYS = ("env.name", "agent.name")
FIGURES = ("intervals.png", "profile.png")
SCALES = {
    "final_return": "each seed's last finite episode return, raw (aggregated per task)",
    "normalized_score": "(final return - random) / (reference - random) per task "
    "(reference_returns): 0 is a uniformly random policy, 1 the reference return; "
    "aggregated over tasks",
}
_MISSING = object()


@dataclasses.dataclass(frozen=True)
class RunFinals:
    """One run directory's final returns and what it is."""

    source: str  # the run directory
    name: str  # its config's name
    label: str  # its group without config.yaml: the config name, or the sweep point
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
    name = str(config.get("name", run["name"]))
    return RunFinals(
        source=str(run_dir),
        name=name,
        label=label or name,
        task=str(config.get("env.name", "unknown")),
        config=config,
        finals=[_last_finite(np.asarray(row)) for row in rows],
    )


def _sweep_runs(sweep_dir: Path) -> list[RunFinals]:
    runs = []
    for point in load_sweep(sweep_dir)["points"]:
        values = point["overrides"].items()
        label = ", ".join(f"{k}={short_value(v)}" for k, v in values)
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


# ------------------------------------------------------------------------------- grouping


@functools.cache
def _defaults(agent_name: str) -> dict[str, Any]:
    """Today's default config of an agent, flattened as config.yaml is read (lists)."""
    from jaxrl_async.config.loader import Config

    agent = AGENT_CONFIGS.get(agent_name)
    if agent is None:
        return {}
    tree = json.loads(json.dumps(dataclasses.asdict(Config(agent=agent()))))
    return _flatten(tree)


def settings(run: RunFinals) -> dict[str, Any] | None:
    """The keys of a run's config that make its experiment (the module's docstring), or
    None for a run without config.yaml. A key the config lacks (one written before the
    key existed) takes its default."""
    if not run.config:
        return None
    agent_name = str(run.config.get("agent.name"))
    agent = AGENT_CONFIGS.get(agent_name)
    on_policy = agent is not None and agent.DATA != "replay"
    return {
        k: v
        for k, v in {**_defaults(agent_name), **run.config}.items()
        if k not in IGNORED_KEYS
        and not k.startswith(IGNORED_SECTIONS)
        and not (on_policy and k.startswith("replay."))
    }


def differing_keys(configs: Sequence[dict]) -> list[str]:
    """The keys whose values are not the same in every config (a key one lacks differs),
    `env.name` and `agent.name` first, then in config order."""
    keys = list(dict.fromkeys(k for config in configs for k in config))
    differing = [
        k for k in keys if any(c.get(k, _MISSING) != configs[0].get(k, _MISSING) for c in configs)
    ]
    return sorted(differing, key=lambda k: FIRST_KEYS.index(k) if k in FIRST_KEYS else 2)


def _shown(value: Any) -> str:
    return "-" if value is _MISSING else short_value(value)


def _naming_keys(configs: list[dict]) -> tuple[list[str], int]:
    """The differing keys that name each of `configs` (all different), and how many more
    differ: all of them up to MAX_NAME_KEYS, else the fewest, taken in order, that tell
    the configs apart."""
    differing = differing_keys(configs)
    if len(differing) <= MAX_NAME_KEYS:
        return differing, 0
    chosen: list[str] = []
    distinct = 1
    for key in differing:
        signatures = {
            json.dumps([_shown(c.get(k, _MISSING)) for k in [*chosen, key]]) for c in configs
        }
        if len(signatures) > distinct:
            chosen.append(key)
            distinct = len(signatures)
        if distinct == len(configs):
            break
    return chosen, len(differing) - len(chosen)


def _config_name(runs: list[RunFinals]) -> str:
    if settings(runs[0]) is None:
        return runs[0].label
    return " + ".join(dict.fromkeys(run.name for run in runs))


def _group_names(groups: list[list[RunFinals]]) -> list[str]:
    """The names of groups of distinct experiments (the module's docstring)."""
    configs = [settings(runs[0]) for runs in groups]
    labels = [_config_name(runs) for runs in groups]
    if len(groups) == 1:
        return labels
    one_name = len(set(labels)) == 1
    names = []
    for config, label in zip(configs, labels):
        if config is None:
            names.append(f"{label} (no config.yaml)" if labels.count(label) > 1 else label)
            continue
        peers = [
            c for c, other in zip(configs, labels) if c is not None and (one_name or other == label)
        ]
        keys, more = _naming_keys(peers)
        part = ", ".join(f"{k}={_shown(config.get(k, _MISSING))}" for k in keys)
        part += f", +{more} other keys" if more else ""
        names.append(label if not keys else part if one_name else f"{label} ({part})")
    seen: dict[str, int] = {}
    unique = []
    for name in names:  # values that print the same (short_value keeps 6 digits)
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{name} #{seen[name]}")
    return unique


def group_runs(runs: list[RunFinals], group_by: str | None = None) -> dict[str, list[RunFinals]]:
    """Runs by group name, in the order first seen: one group per experiment (the module's
    docstring), or per value of the config key `group_by`."""
    if group_by is not None:
        by_value: dict[str, list[RunFinals]] = {}
        for run in runs:
            if group_by not in run.config:
                raise UserError(f"--group-by {group_by}: {run.source} has no such config key")
            label = f"{group_by}={short_value(run.config[group_by])}"
            by_value.setdefault(label, []).append(run)
        return by_value
    experiments: dict[str, list[RunFinals]] = {}
    for run in runs:
        config = settings(run)
        # JSON text as the key: values may be lists (hidden_sizes), which do not hash.
        key = "?" + run.label if config is None else json.dumps(config, sort_keys=True, default=str)
        experiments.setdefault(key, []).append(run)
    members = list(experiments.values())
    return dict(zip(_group_names(members), members))


def _shared(runs: list[RunFinals]) -> dict | None:
    """The settings every run of a group with config.yaml has in common (None: none has)."""
    configs = [c for c in map(settings, runs) if c is not None]
    if not configs:
        return None
    return {k: v for k, v in configs[0].items() if all(c.get(k, _MISSING) == v for c in configs)}


def _key_list(keys: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def _repeated_seeds(runs: list[RunFinals]) -> list[int]:
    """The seeds that runs of one experiment among `runs` hold more than once (a run of
    train.seed=s and n seeds holds s .. s+n-1)."""
    held: dict[tuple[str, int], int] = {}
    for run in runs:
        config = settings(run)
        if config is None:
            continue
        key = json.dumps(config, sort_keys=True, default=str)
        first = int(run.config.get("train.seed", 0))
        for seed in range(first, first + len(run.finals)):
            held[key, seed] = held.get((key, seed), 0) + 1
    return sorted({seed for (_, seed), count in held.items() if count > 1})


def mixing_warnings(groups: dict[str, list[RunFinals]]) -> list[str]:
    """A sentence for each group that holds runs of one task whose configs differ in more
    than the seed (possible with --group-by), one experiment's seed twice, or runs that
    cannot be checked (no config.yaml)."""
    notes = []
    for name, runs in groups.items():
        by_task: dict[str, list[dict]] = {}
        unchecked = 0
        for run in runs:
            config = settings(run)
            if config is None:
                unchecked += 1
            else:
                by_task.setdefault(run.task, []).append(config)
        keys = list(dict.fromkeys(k for cs in by_task.values() for k in differing_keys(cs)))
        seeds = _repeated_seeds(runs)
        if keys:
            notes.append(
                f"group {name!r} merges runs of one env whose configs differ in {_key_list(keys)}"
            )
        if seeds:
            shown = ", ".join(map(str, seeds[:8])) + (", ..." if len(seeds) > 8 else "")
            notes.append(
                f"group {name!r} holds seed {shown} of one experiment more than once "
                "(a rerun repeats the seed's draws; give reruns other train.seed values)"
            )
        if unchecked and len(runs) > 1:
            notes.append(
                f"group {name!r} holds {unchecked} run directories without config.yaml, "
                "whose settings are unchecked"
            )
    return notes


# ----------------------------------------------------------------------------- statistics


def _normalizer(runs: list[RunFinals]):
    """(a run's scores from its returns, the reference returns per task): normalised where
    every task has reference returns, else (None, {})."""
    refs = {}
    for run in runs:
        kwargs = {k: v for k, v in run.config.items() if k.startswith("env.kwargs.")}
        ref = reference(run.task, kwargs)
        if ref is None:
            return None, {}
        refs[run.source] = ref
    by_task = {run.task: refs[run.source] for run in runs}

    def normalize(run: RunFinals, returns: list[float]) -> list[float]:
        ref = refs[run.source]
        return [float(s) for s in stats.normalize(returns, ref.random, ref.high)]

    return normalize, {t: {"random": r.random, "reference": r.high} for t, r in by_task.items()}


def compared(group: dict, score: str) -> tuple[dict, dict[str, list[float]]]:
    """A group's aggregates on the report's `score` scale and, per task, the values they
    aggregate (raw returns: the group's one task)."""
    if score == "normalized_score":
        block = group["normalized_score"]
        return block, block["values"]
    blocks = group["final_return"]
    values = {task: block["values"] for task, block in blocks.items() if block["values"]}
    return (next(iter(blocks.values())) if len(blocks) == 1 else {}), values


def _group_entry(
    name: str, runs: list[RunFinals], normalizer, differing: list[str], seed: int
) -> dict:
    finals = [f for run in runs for f in run.finals]
    shared = _shared(runs) or {}
    returns: dict[str, dict] = {}
    for run in sorted(runs, key=lambda r: r.task):
        block = returns.setdefault(run.task, {"runs": 0, "values": []})
        block["runs"] += len(run.finals)
        block["values"] += stats.finite(run.finals)
    for block in returns.values():
        if block["values"]:
            block.update(stats.describe([block["values"]], seed=seed))
    entry: dict = {
        "name": name,
        "config_names": list(dict.fromkeys(run.name for run in runs)),
        # the keys whose values differ between the report's groups: this group's values
        "config": {k: shared[k] for k in differing if k in shared},
        "runs": len(finals),
        "sources": [run.source for run in runs],
        "tasks": sorted(returns),
        "final_returns": [None if math.isnan(f) else f for f in finals],
        "final_return": returns,
        "normalized_score": None,
    }
    if normalizer is not None:
        scores: dict[str, list[float]] = {}
        for run in sorted(runs, key=lambda r: r.task):
            scores.setdefault(run.task, []).extend(normalizer(run, stats.finite(run.finals)))
        values = {task: s for task, s in scores.items() if s}
        entry["normalized_score"] = {"values": values}
        if values:
            entry["normalized_score"].update(
                stats.describe(list(values.values()), gap=True, seed=seed)
            )
    return entry


def build_report(groups: dict[str, list[RunFinals]], seed: int = 0) -> dict:
    """The report: every group's aggregates, and P(X > Y) for every pair of groups over
    the tasks both hold."""
    everything = [run for runs in groups.values() for run in runs]
    normalizer, references = _normalizer(everything)
    if normalizer is None:
        mixed = [name for name, runs in groups.items() if len({r.task for r in runs}) > 1]
        if mixed:
            raise UserError(
                f"group {mixed[0]!r} mixes envs without reference returns "
                "(reference_scores.py); group so that each group holds one env"
            )
    score = "final_return" if normalizer is None else "normalized_score"
    shared = [c for c in map(_shared, groups.values()) if c is not None]
    differing = differing_keys(shared) if len(shared) > 1 else []
    entries = [
        _group_entry(name, runs, normalizer, differing, seed) for name, runs in groups.items()
    ]
    values = {entry["name"]: compared(entry, score)[1] for entry in entries}
    improvement = {}
    for a, b in itertools.combinations(groups, 2):
        tasks = [t for t in values[a] if t in values[b]]
        if not tasks:
            continue
        value, (low, high) = stats.probability_of_improvement(
            [values[a][t] for t in tasks], [values[b][t] for t in tasks], seed=seed
        )
        improvement[f"{a} > {b}"] = {"value": value, "ci": [low, high], "tasks": tasks}
    return {
        # the scale the groups are compared on: P(X > Y), the figures, report.md's first table
        "score": score,
        "scales": {k: v for k, v in SCALES.items() if k == "final_return" or references},
        "reference_returns": references or None,
        "confidence": stats.CONFIDENCE,
        "resamples": stats.RESAMPLES,
        "seed": seed,
        "differing_keys": differing,
        "warnings": mixing_warnings(groups),
        "groups": entries,
        "probability_of_improvement": improvement,
    }


# -------------------------------------------------------------------------------- output


def _num(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def _cell(value: float | None, ci: Sequence[float] = ()) -> str:
    """A value and its interval: `485 [475, 500]`."""
    if value is None:
        return "-"
    return f"{_num(value)} [{_num(ci[0])}, {_num(ci[1])}]"


TITLES = {"iqm": "IQM", "mean": "mean", "median": "median", "optimality_gap": "optimality gap"}


def format_markdown(report: dict, figures: Sequence[str] = (), warnings: bool = True) -> str:
    """report.md: what the groups differ in, the groups' table on the compared scale (and
    with normalised scores, the raw final returns per task), the pairs' table, the
    figures. `warnings=False` leaves out the warning line (the CLI prints it to stderr)."""
    normalized = report["score"] == "normalized_score"
    keys = ["iqm", "mean", "median"] + (["optimality_gap"] if normalized else [])
    intervals = (
        f"{report['confidence']:.0%} stratified-bootstrap confidence intervals "
        f"({report['resamples']} resamples, seed {report['seed']})"
    )
    if normalized:
        refs = "; ".join(
            f"{task}: {_num(r['random'])} and {_num(r['reference'])}"
            for task, r in report["reference_returns"].items()
        )
        intro = (
            f"Aggregates of each group's normalised scores over runs and tasks, with "
            f"{intervals}. A normalised score is 0 at a uniformly random policy's return "
            f"and 1 at the reference return ({refs})."
        )
    else:
        intro = f"Aggregates of each group's final returns over runs, with {intervals}."
    lines = ["# Report", "", intro]
    if report["differing_keys"]:
        lines += ["", f"The groups' configs differ in {_key_list(report['differing_keys'])}."]
    if warnings and report["warnings"]:
        lines += ["", f"**Warning:** {'; '.join(report['warnings'])}."]
    lines += [
        "",
        "| group | runs | tasks | " + " | ".join(TITLES[k] for k in keys) + " |",
        "| --- | ---: | --- | " + " | ".join("---:" for _ in keys) + " |",
    ]
    for g in report["groups"]:
        block = compared(g, report["score"])[0]
        cells = [_cell(block.get(k), block.get(f"{k}_ci", ())) for k in keys]
        lines.append(
            f"| {g['name']} | {g['runs']} | {', '.join(g['tasks'])} | " + " | ".join(cells) + " |"
        )
    if normalized:
        raw = ["iqm", "mean", "median"]
        lines += [
            "",
            "Final returns (raw), per task:",
            "",
            "| group | task | runs | " + " | ".join(TITLES[k] for k in raw) + " |",
            "| --- | --- | ---: | " + " | ".join("---:" for _ in raw) + " |",
        ]
        for g in report["groups"]:
            for task, block in g["final_return"].items():
                cells = [_cell(block.get(k), block.get(f"{k}_ci", ())) for k in raw]
                lines.append(
                    f"| {g['name']} | {task} | {block['runs']} | " + " | ".join(cells) + " |"
                )
    if report["probability_of_improvement"]:
        lines += ["", "| P(X > Y) | probability [CI] |", "| --- | ---: |"]
        for pair, p in report["probability_of_improvement"].items():
            lines.append(f"| {pair} | {_cell(p['value'], p['ci'])} |")
    lines += [""] + [f"![{Path(f).stem}]({f})" for f in figures]
    return "\n".join(lines) + "\n"
