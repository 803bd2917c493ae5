"""The run plan: where a run's work goes (its layout), how many ticks each host call
runs, how many calls the run makes, and where a resumed run starts.

Every host call runs the same compiled chunk of `ticks` ticks, so a run compiles one
training program; a resume keeps its checkpoint's chunk and layout.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from pathlib import Path

from jaxrl_async.config.loader import Config
from jaxrl_async.errors import UserError
from jaxrl_async.pipeline.layout import Layout, Machine, choose_layout
from jaxrl_async.run import rundir


def default_run_dir(config: Config, root: str | Path = "runs") -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(root) / f"{config.name}-{stamp}"
    suffix = 1
    while path.exists():
        suffix += 1
        path = Path(root) / f"{config.name}-{stamp}-{suffix}"
    return path


def plan_calls(num_updates: int, target: int) -> tuple[int, int]:
    """(ticks per host call, host calls): every call runs the same compiled chunk.

    Prefers the largest divisor of num_updates not above `target`; when that is under
    half the target (num_updates prime, say) the run is shortened to a whole number
    of target-sized calls instead, dropping fewer than `target` updates, rather than
    compiling a second program for the remainder.
    """
    target = max(1, min(target, num_updates))
    ticks = max(d for d in range(1, target + 1) if num_updates % d == 0)
    if 2 * ticks < target:
        ticks = target
    return ticks, num_updates // ticks


@dataclasses.dataclass(frozen=True)
class RunPlan:
    layout: Layout  # devices and placement, chosen once for the run
    ticks: int  # ticks per host call (the compiled chunk's length)
    num_calls: int  # host calls of the whole run
    batch: int  # env steps per tick
    point: rundir.ResumePoint | None = None  # where a resumed run starts
    # Host calls per log record: 1 for a JAX run, whose calls are sized to
    # train.log_every; a host run's calls are rounds, train.log_every // batch a record.
    log_calls: int = 1

    @property
    def start_call(self) -> int:
        return 0 if self.point is None else self.point.calls

    @property
    def num_updates(self) -> int:
        return self.ticks * self.num_calls

    @property
    def steps_per_call(self) -> int:
        return self.ticks * self.batch


def plan_run(
    config: Config, run_dir: Path | None, resume: bool, machine: Machine | None = None
) -> RunPlan:
    """The run's layout on `machine` (default: this one; a ConfigError if it cannot be laid
    out). A fresh run tiles its updates with one chunk size; a resumed run keeps the chunk
    of its checkpoint (a new total_steps may add or drop host calls)."""
    layout = choose_layout(config, machine)
    batch = config.batch_size
    if not resume:
        ticks, calls = plan_calls(config.num_updates, max(1, config.train.log_every // batch))
        return RunPlan(layout, ticks, calls, batch)
    if run_dir is None:
        raise UserError("resuming needs the run directory")
    point = rundir.resume_point(run_dir, config)
    calls = config.num_updates // point.ticks
    check_work_left(run_dir, point, calls, point.ticks * batch, config.train.total_steps)
    return RunPlan(layout, point.ticks, calls, batch, point)


def plan_host(config: Config, run_dir: Path | None, resume: bool) -> RunPlan:
    """A host run's plan: one round (one update) per host call, train.log_every // batch
    calls per log record, the learner on its mesh (`host/placement.py`)."""
    from jaxrl_async.host.placement import host_layout

    layout = host_layout(config)
    batch, log_calls = config.batch_size, max(1, config.train.log_every // config.batch_size)
    if not resume:
        return RunPlan(layout, 1, config.num_updates, batch, log_calls=log_calls)
    if run_dir is None:
        raise UserError("resuming needs the run directory")
    point = rundir.resume_point(run_dir, config)
    check_work_left(run_dir, point, config.num_updates, batch, config.train.total_steps)
    return RunPlan(layout, 1, config.num_updates, batch, point, log_calls)


def check_work_left(
    run_dir: Path, point: rundir.ResumePoint, calls: int, per_call: int, total_steps: int
) -> None:
    """A UserError unless resuming at `point` has work to do: host calls to make, or a run
    checkpointed at its end but not finished (no summary.json of that point: a stop or a
    crash after the last save), which the resume finishes without training."""
    if calls > point.calls or (calls == point.calls and not rundir.finished(run_dir, point.step)):
        return
    done = "finished" if calls == point.calls else "checkpointed"
    raise UserError(
        f"nothing to resume: {run_dir} is {done} at {point.step:,} env steps and "
        f"train.total_steps={total_steps} adds no host call of {per_call:,} steps "
        f"(e.g. train.total_steps={point.step + per_call})"
    )
