"""A run's records and where they go: the log records of each host call (callbacks,
metrics.jsonl, TensorBoard, W&B with logger.wandb, the progress bar)."""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import numpy as np

from jaxrl_async.config.loader import Config
from jaxrl_async.run import rundir
from jaxrl_async.run.sinks import JsonlSink, Progress, TensorBoardSink, emit
from jaxrl_async.training.plan import RunPlan


@dataclasses.dataclass(frozen=True)
class Point:
    """One grid point of a sweep's RunGroup: its runs and where its records go."""

    runs: slice  # its runs' positions among the group's train.num_seeds runs
    run_dir: Path | None  # its own metrics.jsonl and TensorBoard events (None: kept in memory)


def _aggregate(chunk_metrics: dict, env_steps: int, wall: float, sps: float) -> dict:
    """One log record from the stacked [K] (or, seed-batched, [N, K]) metrics of a chunk.

    With N seeds each seed's episode statistics are kept as `<name>/seed<k>` and the
    plain names hold their mean over seeds; other metrics are averaged over everything.
    """
    m = jax.device_get(chunk_metrics)
    per_seed = lambda x: np.atleast_2d(np.asarray(x, np.float64)).sum(-1)  # noqa: E731
    episodes = per_seed(m.pop("episodes"))
    ret_sum, len_sum = per_seed(m.pop("episode_return_sum")), per_seed(m.pop("episode_length_sum"))
    with np.errstate(invalid="ignore", divide="ignore"):
        returns = np.where(episodes > 0, ret_sum / episodes, np.nan)
        lengths = np.where(episodes > 0, len_sum / episodes, np.nan)
    record = {
        "env_steps": env_steps,
        "wall_seconds": wall,
        "sps": sps,
        "episodes": int(episodes.sum()),
        "episode_return": _mean_finite(returns),
        "episode_length": _mean_finite(lengths),
    }
    if len(episodes) > 1:
        for k, (ret, length) in enumerate(zip(returns, lengths)):
            record[f"episode_return/seed{k}"] = float(ret)
            record[f"episode_length/seed{k}"] = float(length)
    record.update({k: float(np.max(v) if k.endswith("_max") else np.mean(v)) for k, v in m.items()})
    return record


def _mean_finite(x) -> float:
    finite = np.asarray(x)[np.isfinite(x)]
    return float(finite.mean()) if finite.size else math.nan


class RunLog:
    """The log records of a run and where they go: callbacks, metrics.jsonl, TensorBoard,
    the progress bar. Times SPS between records; time the loop spends on anything but
    training (evaluating, blocking on a checkpoint) is `excluded` from it."""

    def __init__(
        self,
        config: Config,
        plan: RunPlan,
        run_dir: Path | None,
        callbacks: Sequence[Callable[[dict], None]],
        main: bool,
        points: Sequence[Point] = (),
    ):
        self.records: list[dict] = [] if plan.point is None else list(plan.point.records)
        self.sinks: list = list(callbacks) if main else []
        self._closers: list = []
        self._plan, self._main, self._logger = plan, main, config.logger
        # A sweep group's own directory is no W&B run: each of its points is one.
        self.sinks += self._file_sinks(run_dir, None if points else config.name)
        # A RunGroup's points: each logs its own runs' records to its own directory.
        self.points = list(points)
        self.point_records: list[list[dict]] = []
        self.point_sinks: list[list] = []
        for point in self.points:
            records = []
            if point.run_dir is not None and plan.point is not None:
                records = rundir.read_records(point.run_dir, upto=plan.point.step)
                if main:  # cut back to the checkpoint, as for the group's own records
                    rundir.write_records(point.run_dir, records)
            self.point_records.append(records)
            group = None if point.run_dir is None else point.run_dir.parent.name
            self.point_sinks.append(self._file_sinks(point.run_dir, group))
        self.progress = Progress(
            plan.num_updates * plan.batch,
            config.train.progress and main,
            desc=config.name,
            initial=plan.start_call * plan.steps_per_call,
        )
        self._seeds, self._steps_per_call = config.train.num_seeds, plan.steps_per_call
        self._prior = 0.0 if plan.point is None else plan.point.train_seconds
        self.start = self._last = time.perf_counter()
        self._last_calls = plan.start_call
        self._show_progress = config.train.progress and main
        self.warnings: list[str] = []

    def _file_sinks(self, run_dir: Path | None, group: str | None) -> list:
        """metrics.jsonl and TensorBoard events in `run_dir` (none on other processes), and
        with logger.wandb its W&B run, in W&B group `group` by default (None: no W&B run)."""
        if run_dir is None or not self._main:
            return []
        point = self._plan.point
        sinks: list = [
            JsonlSink(run_dir / "metrics.jsonl"),
            TensorBoardSink(run_dir, None if point is None else point.step + 1),
        ]
        if self._logger.wandb and group is not None:
            from jaxrl_async.run.tracking import WandbRun

            sinks.append(WandbRun(self._logger, run_dir, group))
        self._closers += sinks
        return sinks

    def train_seconds(self, now: float | None = None) -> float:
        """Training time of the whole run so far, earlier sessions of a resumed run included."""
        return self._prior + (time.perf_counter() if now is None else now) - self.start

    def exclude(self, seconds: float) -> None:
        self._last += seconds

    def log(self, calls: int, chunk_metrics, extra: dict | None = None) -> None:
        chunk_metrics = jax.device_get(chunk_metrics)
        now = time.perf_counter()
        seconds, wall = max(now - self._last, 1e-9), self.train_seconds(now)
        env_steps = calls * self._steps_per_call
        steps = (calls - self._last_calls) * self._steps_per_call  # since the last record
        record = _aggregate(chunk_metrics, env_steps, wall, self._seeds * steps / seconds)
        self._last, self._last_calls = now, calls
        record.update(extra or {})
        self.records.append(record)
        emit(self.sinks, record)
        for point, records, sinks in zip(self.points, self.point_records, self.point_sinks):
            runs = len(range(self._seeds)[point.runs])
            mine = jax.tree.map(lambda x, runs=point.runs: x[runs], chunk_metrics)
            records.append(_aggregate(mine, env_steps, wall, runs * steps / seconds))
            emit(sinks, records[-1])
        self.progress.update(record)

    def video(self, env_steps: int, frames, fps: float) -> None:
        """An evaluation's episode (frames [T, H, W, 3]) as a GIF, to the sinks that show
        one (TensorBoard, W&B)."""
        shows = [sink.video for sink in self.sinks if hasattr(sink, "video")]
        if shows:
            from jaxrl_async.evaluation.writer import gif_bytes

            gif = gif_bytes(frames, fps)
            for show in shows:
                show(env_steps, gif)

    def warn(self, line: str) -> None:
        """A line for the user (process 0): above the progress bar, or on stderr without
        one; kept in `warnings` for summary.json."""
        self.warnings.append(line)
        if self._main:
            if self._show_progress:
                self.progress.write(line)
            else:
                print(line, file=sys.stderr, flush=True)

    def metrics(self) -> dict[str, np.ndarray]:
        """The records as arrays, one entry per record (a TrainResult's metrics)."""
        return {k: np.asarray([r[k] for r in self.records]) for k in (self.records[:1] or [{}])[0]}

    def close(self) -> None:
        self.progress.close()
        for closer in self._closers:
            closer.close()
