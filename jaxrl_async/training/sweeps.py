"""Sweeps: a grid of hyperparameters x seeds, trained with one compiled program per shape.

`sweep(config, grid)` trains every combination of the grid's values, `train.num_seeds`
seeds each. The agent's SWEEPABLE fields (learning rate, entropy cost, gamma, ...) are
traced values of its learner state, so every combination of them shares one program: the
points and their seeds are vmapped side by side as the runs of one RunGroup. Every other
key (network sizes, env count, algorithm settings that shape arrays) is structural: each
combination of those is a group of its own, compiled and trained one after another.

    SWEEP_DIR/sweep.yaml        the base config and the grid (what a resume reads)
    SWEEP_DIR/sweep.json        per point: overrides, final return mean/std/seeds, AUC; best
    SWEEP_DIR/<point>/          config.yaml, metrics.jsonl, summary.json (and TensorBoard
                                events) as a single run of that point's seeds writes them
    SWEEP_DIR/groups/<g>/       each group's own run directory: its checkpoints and the
                                records of all its runs

A point with S seeds starts from the keys of the single run with those values (seeds
train.seed .. train.seed + S - 1), so it equals that run up to float rounding.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import yaml
from omegaconf import OmegaConf

from jaxrl_async.analysis.sweep_table import (
    auc,
    best_point,
    format_table,
    point_summary,
    short_value,
    table_row,
)
from jaxrl_async.config.loader import Config, _parse_overrides, with_overrides
from jaxrl_async.errors import ConfigError, RunFailure, TrainingInterrupted, UserError
from jaxrl_async.run import rundir, tracking

__all__ = ["auc", "format_table", "resume_sweep", "split_overrides", "sweep", "sweepable"]

# Sections whose keys a sweep may vary (env.num_envs, agent.hidden_sizes, replay.alpha, ...);
# the others say how a run is kept, not what it trains.
STRUCTURAL_SECTIONS = ("env", "agent", "pipeline", "replay")


@dataclasses.dataclass
class SweepResult:
    """What a sweep returns: the table of sweep.json and every point's log records."""

    points: list[dict]  # sweep.json's points (overrides, final_return_*, auc, run_dir)
    best: int | None  # the index of the point with the highest mean final return
    records: list[list[dict]]  # per point, its log records (as a single run's metrics)
    summaries: list[dict]  # per point, its summary.json
    sweep_dir: Path | None
    # per group, its final PipelineState, runs stacked on a leading axis in point-major
    # order (point p's seeds at p * num_seeds ...); None for a group an earlier session ran
    states: list = dataclasses.field(default_factory=list)

    def metrics(self, point: int) -> dict[str, np.ndarray]:
        """Point `point`'s records as arrays, one entry per log point (TrainResult.metrics)."""
        records = self.records[point]
        return {
            k: np.asarray([r.get(k, math.nan) for r in records])
            for k in (records[0] if records else {})
        }


def sweepable(config: Config) -> list[str]:
    """The keys (agent.<field>) one program can sweep for this config's agent."""
    return [f"agent.{name}" for name in type(config.agent).SWEEPABLE]


def split_overrides(overrides: Sequence[str], config_for: Callable[[list[str]], Config]):
    """(plain overrides, grid) from the CLI's `section.key=value` words: a value that is a
    list on a key that takes one value (`agent.learning_rate=[1e-4,3e-4]`), or a list of
    lists on a key that takes a list (`agent.hidden_sizes=[[64,64],[256,256]]`), is a
    grid axis; everything else is a plain override. `config_for(plain)` loads the base."""
    parsed = cast(dict, OmegaConf.to_container(_parse_overrides(overrides)))  # malformed: one line
    plain, axes = [], []
    for item in overrides:
        key = item.split("=", 1)[0]
        values: Any = parsed
        for part in key.split("."):
            values = values[part]
        if isinstance(values, list) and values:
            axes.append((key, values))
        else:
            plain.append(item)
    base = config_for(plain)
    grid = {}
    for key, values in axes:
        section, _, field = key.partition(".")
        current = getattr(getattr(base, section, None), field.split(".")[0], None)
        takes_list = isinstance(current, (list, tuple))
        if takes_list and not all(isinstance(v, list) for v in values):
            plain.append(f"{key}={json.dumps(values)}")  # one list value, not a grid
            continue
        grid[key] = values
    return plain, grid


@dataclasses.dataclass(frozen=True)
class Group:
    """One structural combination: its config (num_seeds = all its runs) and its points."""

    index: int
    config: Config  # the base with this group's structural values (and its first point's)
    structural: dict[str, Any]
    points: list[dict[str, Any]]  # the full overrides of each point (structural + numeric)
    point_configs: list[Config]  # what each point is as a single run


def plan(config: Config, grid: dict[str, list]) -> list[Group]:
    """The groups of a sweep, every point's config checked before anything compiles."""
    if not grid:
        raise ConfigError(
            "a sweep needs at least one key with a list of values, e.g. "
            "agent.learning_rate=[1e-4,3e-4]"
        )
    if config.pipeline.placement == "split":
        raise ConfigError(
            "a sweep needs pipeline.placement=fused (its runs are vmapped inside one program)"
        )
    config = dataclasses.replace(  # auto: fused, whatever one run alone would get
        config, pipeline=dataclasses.replace(config.pipeline, placement="fused")
    )
    if config.eval.every > 0:
        raise ConfigError(
            "a sweep trains its runs side by side and evaluates none of them: "
            "set eval.every=0 (jaxrl-async eval RUN_DIR evaluates afterwards)"
        )
    if config.distributed.num_processes > 1:
        raise ConfigError("a sweep runs in one process")
    names = set(sweepable(config))
    for key, values in grid.items():
        if not isinstance(values, (list, tuple)) or not values:
            raise ConfigError(f"sweep values of {key} must be a non-empty list, got {values!r}")
        if key.split(".", 1)[0] not in STRUCTURAL_SECTIONS or key == "agent.name":
            raise ConfigError(
                f"{key} is not sweepable: a sweep varies keys of "
                f"{', '.join(STRUCTURAL_SECTIONS)} (agent.name aside; seeds are "
                f"train.num_seeds per point); in one program: {', '.join(sorted(names))}"
            )
    numeric = {k: v for k, v in grid.items() if k in names}
    structural = {k: v for k, v in grid.items() if k not in names}
    groups: list[Group] = []
    for s_values in itertools.product(*structural.values()):
        s_over = dict(zip(structural, s_values))
        points, configs = [], []
        for n_values in itertools.product(*numeric.values()):
            point = {**s_over, **dict(zip(numeric, n_values))}
            configs.append(with_overrides(config, _words(point)))
            points.append(point)
        runs = len(points) * config.train.num_seeds
        group_config = with_overrides(configs[0], [f"train.num_seeds={runs}"])
        groups.append(Group(len(groups), group_config, s_over, points, configs))
    return groups


def _words(overrides: dict[str, Any]) -> list[str]:
    return [f"{k}={json.dumps(v)}" for k, v in overrides.items()]


def point_name(index: int, overrides: dict[str, Any]) -> str:
    """A point's directory: its index, then its values (`003_learning_rate=0.001_...`)."""
    parts = [f"{k.rsplit('.', 1)[-1]}={short_value(v)}" for k, v in overrides.items()]
    return "_".join([f"{index:03d}", *parts]).replace("/", "-")


@dataclasses.dataclass(frozen=True)
class _Session:
    """How this session runs a sweep: where it writes (None: nowhere), on which env, who
    hears the log records, and whether it continues an earlier session's sweep."""

    sweep_dir: Path | None
    env: Any = None
    env_params: Any = None
    callbacks: Sequence[Callable[[dict], None]] = ()
    resume: bool = False


def sweep(
    config: Config,
    grid: dict[str, list],
    *,
    sweep_dir: str | Path | None = None,
    env=None,
    env_params=None,
    callbacks: Sequence[Callable[[dict], None]] = (),
) -> SweepResult:
    """Train the grid's points x `config.train.num_seeds` seeds; write to `sweep_dir` if
    given. `grid` maps keys to lists of values ({"agent.learning_rate": [1e-4, 3e-4]}).
    `callbacks` get each group's log records (all its runs), as train()'s do.

    Every point is checked before anything compiles (a bad value is a ConfigError naming
    its key). Each structural group trains as one program; a Ctrl-C saves the running
    group's checkpoint and raises TrainingInterrupted naming the sweep directory, which
    `resume_sweep` (`jaxrl-async resume SWEEP_DIR`) continues bit for bit.
    """
    groups = plan(config, grid)
    sweep_dir = None if sweep_dir is None else Path(sweep_dir)
    if sweep_dir is not None:
        if sweep_dir.exists() and any(sweep_dir.iterdir()):
            raise UserError(f"sweep directory {sweep_dir} exists and is not empty")
        sweep_dir.mkdir(parents=True, exist_ok=True)
        rundir.write_atomic(
            sweep_dir / "sweep.yaml",
            yaml.safe_dump(
                {"grid": grid, "config": yaml.safe_load(config.to_yaml())}, sort_keys=False
            ),
        )
    return _run(
        groups, config.train.num_seeds, _Session(sweep_dir, env, env_params, tuple(callbacks))
    )


def _run(groups: list[Group], seeds: int, session: _Session) -> SweepResult:
    """Train (or, finished in an earlier session, read back) each group in turn."""
    sweep_dir = session.sweep_dir
    rows, records, summaries = [], [], []
    states: list[Any] = []  # per group, its final PipelineState (None: read back)
    first = 0
    for group in groups:
        names = [point_name(first + i, p) for i, p in enumerate(group.points)]
        dirs = [None if sweep_dir is None else sweep_dir / n for n in names]
        group_dir = None if sweep_dir is None else sweep_dir / "groups" / str(group.index)
        done = group_dir is not None and (group_dir / "summary.json").is_file()
        if done:  # finished in an earlier session: read back what it wrote
            assert sweep_dir is not None and group_dir is not None  # as `done` implies
            group_summary = json.loads((group_dir / "summary.json").read_text())
            point_records = [rundir.read_records(sweep_dir / n, upto=math.inf) for n in names]
            states.append(None)
        else:
            result = _train_group(group, dirs, group_dir, seeds, session)
            group_summary, point_records = result.summary, result.point_records
            states.append(result.state)
        for overrides, recs, name, point_dir in zip(group.points, point_records, names, dirs):
            summary = point_summary(
                overrides, recs, group_summary, seeds, len(group.points) * seeds
            )
            # A point whose summary.json an earlier session could not write gets it now.
            if point_dir is not None and (not done or not (point_dir / "summary.json").is_file()):
                with _failing_as_sweep(session), rundir.naming_intact(group_dir):
                    rundir.write_summary(point_dir, summary)
                tracking.finish(point_dir, summary)
            rows.append(table_row(overrides, recs, seeds, name))
            records.append(recs)
            summaries.append(summary)
        first += len(group.points)
    best = best_point(rows)
    if sweep_dir is not None:
        rundir.write_atomic(
            sweep_dir / "sweep.json", json.dumps({"points": rows, "best": best}, indent=2) + "\n"
        )
    return SweepResult(rows, best, records, summaries, sweep_dir, states)


def _train_group(group: Group, dirs, group_dir, seeds: int, session: _Session):
    """Train one group, its points' runs side by side (resumed from its checkpoint where
    the session resumes and one was saved; else its directories start over)."""
    from jaxrl_async.training import trainer

    resuming = group_dir is not None and session.resume and _has_checkpoint(group_dir)
    if group_dir is not None and not resuming:  # no checkpoint: start over
        for d, point_config in zip([group_dir, *dirs], [None, *group.point_configs]):
            shutil.rmtree(d, ignore_errors=True)
            if point_config is not None:
                d.mkdir(parents=True)
                rundir.write_atomic(d / "config.yaml", point_config.to_yaml())
    numeric = [k for k in group.points[0] if k not in group.structural]
    runs = len(group.points) * seeds
    run_group = trainer.RunGroup(
        seeds=tuple(group.config.train.seed + s for _ in group.points for s in range(seeds)),
        hparams={}
        if runs == 1
        else {
            k.split(".", 1)[1]: tuple(float(p[k]) for p in group.points for _ in range(seeds))
            for k in numeric
        },
        points=tuple(
            trainer.Point(slice(i * seeds, (i + 1) * seeds), d) for i, d in enumerate(dirs)
        ),
    )
    try:
        with _failing_as_sweep(session):
            return trainer.train(
                group.config,
                env=session.env,
                env_params=session.env_params,
                run_dir=group_dir,
                callbacks=session.callbacks,
                resume=resuming,
                group=run_group,
            )
    except TrainingInterrupted as e:
        raise TrainingInterrupted(
            e.env_steps,
            session.sweep_dir if e.run_dir is not None else None,
            resume="jaxrl_async.resume_sweep",
        ) from None


@contextlib.contextmanager
def _failing_as_sweep(session: _Session):
    """A failure inside (a save or a file that could not be written) resumes the sweep,
    not its group alone."""
    try:
        yield
    except RunFailure as e:
        e.run_dir = session.sweep_dir if e.run_dir is not None else None
        raise


def default_sweep_dir(config: Config, root: str | Path = "runs") -> Path:
    from jaxrl_async.training.plan import default_run_dir

    return default_run_dir(dataclasses.replace(config, name=f"{config.name}-sweep"), root)


def finish_sweep(result: SweepResult) -> None:
    """What the CLI shows at a sweep's end: the table, and where its files and plot are."""
    print(format_table(result.points, result.best), flush=True)
    if result.sweep_dir is not None:
        from jaxrl_async.analysis.plot import plot_sweep

        print(f"{result.sweep_dir / 'sweep.json'}\n{plot_sweep(result.sweep_dir)}", flush=True)


def _has_checkpoint(group_dir: Path) -> bool:
    checkpoints = rundir.checkpoint_dir(group_dir)
    return checkpoints.is_dir() and any(p.name.isdigit() for p in checkpoints.iterdir())


def resume_sweep(
    sweep_dir: str | Path,
    *,
    env=None,
    env_params=None,
    callbacks: Sequence[Callable[[dict], None]] = (),
) -> SweepResult:
    """Continue the sweep in `sweep_dir`: finished groups are read back, the interrupted one
    resumes from its checkpoint, the rest train."""
    from jaxrl_async.config.loader import load_config

    sweep_dir = Path(sweep_dir)
    path = sweep_dir / "sweep.yaml"
    if not path.is_file():
        raise UserError(f"{sweep_dir} is not a sweep directory (no sweep.yaml)")
    try:
        saved = yaml.safe_load(path.read_text())
        grid, tree = saved["grid"], saved["config"]
    except (yaml.YAMLError, KeyError, TypeError):
        raise UserError(f"{path} is not a sweep's sweep.yaml") from None
    config_path = sweep_dir / "groups" / "base.yaml"
    config_path.parent.mkdir(exist_ok=True)
    rundir.write_atomic(config_path, yaml.safe_dump(tree, sort_keys=False))
    config = dataclasses.replace(load_config(config_path), name=tree.get("name", "custom"))
    return _run(
        plan(config, grid),
        config.train.num_seeds,
        _Session(sweep_dir, env, env_params, tuple(callbacks), resume=True),
    )
