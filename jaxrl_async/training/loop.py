"""The run loop, written once for both engines (`engine.py`): advance the engine a host
call at a time until the plan is done, and between calls log, evaluate, checkpoint, check
for divergence and stop on Ctrl-C."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxrl_async.config.loader import Config
from jaxrl_async.errors import RunFailure, TrainingDiverged, TrainingInterrupted
from jaxrl_async.evaluation.results import NO_EVAL
from jaxrl_async.run import checkpoint as ckpt
from jaxrl_async.run import distributed, rundir
from jaxrl_async.run.divergence import DivergenceGuard
from jaxrl_async.run.interrupts import interrupts_between_calls
from jaxrl_async.run.sinks import RunFileError
from jaxrl_async.training.engine import Engine
from jaxrl_async.training.log import RunLog
from jaxrl_async.training.plan import RunPlan


@dataclasses.dataclass
class Run:
    """A started run: what the loop and the summary read."""

    config: Config
    plan: RunPlan
    engine: Engine
    state: Any  # the engine's started state
    run_dir: Path | None


@dataclasses.dataclass
class LoopTimes:
    loop_seconds: float
    checkpoint_seconds: float  # the loop blocked on saves


def run_loop(run: Run, log: RunLog, saver: ckpt.Checkpointer | None):
    """Advance the engine until the plan is done; returns (final state, LoopTimes).

    A JAX engine's call is dispatched before the previous call's metrics are logged, so
    logging overlaps training. Evaluations and checkpoints happen at host-call boundaries;
    an interrupt (SIGINT / SIGTERM, or an engine that stopped mid-call) saves there and
    raises TrainingInterrupted.
    """
    config, plan, engine = run.config, run.plan, run.engine
    state, steps_per_call = run.state, plan.steps_per_call
    saved = -1 if plan.point is None else plan.point.calls  # host calls in the newest checkpoint
    checkpoint_seconds, stopped = 0.0, False
    pending = _Pending(log, engine, divergence_guard(run, log), plan.log_calls)
    with (
        interrupts_between_calls(on_signal=engine.on_interrupt) as interrupted,
        _naming_checkpoint(run, lambda: saved, pending),
    ):
        call = plan.start_call
        while True:
            stop = distributed.any_process(interrupted() or stopped)  # all stop together
            last = call == plan.num_calls
            if (
                engine.evaluation is not None
                and pending.records
                and (last or (not stop and due(config.eval.every, call, steps_per_call)))
            ):
                pending.evaluate(state, call * steps_per_call)
            if stop or last or due(config.checkpoint.every, call, steps_per_call):
                pending.flush()  # metrics.jsonl reaches the checkpoint's step first
                if saver is not None and call > saved:
                    checkpoint_seconds += _save(run, saver, log, state, call, stop or last)
                    saved = call
            if stop:
                raise TrainingInterrupted(
                    call * steps_per_call, run.run_dir if saved == call else None
                )
            if last:
                break
            advanced = engine.advance(state)  # dispatched; runs while we log the last one
            if advanced is None:  # the engine stopped before the call was whole
                stopped = True
                continue
            state, call = advanced.state, call + 1
            pending.flush_full()
            pending.hold(call, advanced.metrics)
    jax.block_until_ready(state)
    return state, LoopTimes(time.perf_counter() - log.start, checkpoint_seconds)


@contextlib.contextmanager
def _naming_checkpoint(run: Run, saved: Callable[[], int], pending: _Pending):
    """What the run's failures inside say of its checkpoints: TrainingDiverged names the
    newest (host calls `saved()`; -1: none), whose state's metrics were all checked; a
    save that failed names the run to resume where an earlier checkpoint is intact; a
    failure of the engine's (an actor's env, an evaluation env) keeps the records so far
    and names the run to resume where a checkpoint was saved."""
    try:
        yield
    except TrainingDiverged as e:
        if run.run_dir is not None and saved() >= 0:
            e.checkpoint = rundir.checkpoint_dir(run.run_dir) / str(
                saved() * run.plan.steps_per_call
            )
        raise
    except ckpt.CheckpointWriteError as e:
        e.run_dir = None if e.latest is None else run.run_dir
        raise
    except RunFailure as e:
        if not isinstance(e, RunFileError):  # metrics.jsonl itself may be what failed
            pending.flush()
        if e.run_dir is None and saved() > 0:
            e.run_dir = run.run_dir
        raise


def divergence_guard(run: Run, log: RunLog) -> DivergenceGuard:
    """The run's check of each call's metrics. A sweep group's points only warn: one
    point diverging (a learning rate too large) does not end the others."""
    config, points = run.config, log.points
    policy = "warn" if points else config.train.nan_policy

    def name_run(k: int) -> str:
        if not points:
            return f"seed {config.train.seed + k}"
        i = next(i for i, p in enumerate(points) if k in range(config.train.num_seeds)[p.runs])
        where = points[i].run_dir
        return f"point {i}" + ("" if where is None else f" ({where.name})")

    plan = run.plan
    seeds = config.train.num_seeds
    return DivergenceGuard(policy, plan.ticks, plan.batch, seeds, log.warn, name_run)


class _Pending:
    """The metrics of the calls since the last record, logged as one record at each
    multiple of `log_calls` host calls once the next call is dispatched, with the evaluation done
    at their boundary (an evaluated call ends a record; every record has the eval keys
    when evaluating: NaN and 0 where not evaluated), then checked for divergence: a
    checkpoint of a call's state is written only after its metrics pass."""

    def __init__(self, log: RunLog, engine: Engine, guard: DivergenceGuard, log_calls: int):
        self._log, self._engine, self._guard = log, engine, guard
        self._log_calls = log_calls
        self._items: list[tuple[int, Any]] = []
        self._evaluated: dict | None = None

    @property
    def records(self) -> bool:
        return bool(self._items)

    def hold(self, calls: int, metrics) -> None:
        self._items.append((calls, metrics))

    def evaluate(self, state, env_steps: int) -> None:
        evaluation = self._engine.evaluation
        assert evaluation is not None
        spent = evaluation.seconds + evaluation.compile_seconds
        self._evaluated = self._engine.evaluate(state, env_steps)
        video = getattr(evaluation, "video", None)  # eval.video: evaluation/periodic.py
        if video is not None:
            self._log.video(env_steps, *video)
        self._log.exclude(evaluation.seconds + evaluation.compile_seconds - spent)

    def flush_full(self) -> None:
        """Flush at every multiple of `log_calls` host calls, and where an evaluation ended
        the calls held (as a checkpoint's flush does)."""
        if self._items and (
            self._items[-1][0] % self._log_calls == 0 or self._evaluated is not None
        ):
            self.flush()

    def flush(self) -> None:
        if self._items:
            extra = None if self._engine.evaluation is None else (self._evaluated or NO_EVAL)
            calls = self._items[-1][0]
            metrics = _joined([jax.device_get(m) for _, m in self._items])
            self._items, self._evaluated = [], None
            self._log.log(calls, metrics, extra)
            self._guard.check(calls, metrics)


def _joined(calls: list[dict]) -> dict:
    """The metrics of several calls as one call's: each key's values joined along the
    last (ticks) axis; one call's unchanged."""
    if len(calls) == 1:
        return calls[0]
    return {
        k: np.concatenate([np.atleast_1d(np.asarray(m[k])) for m in calls], axis=-1)
        for k in calls[0]
    }


def _save(run: Run, saver: ckpt.Checkpointer, log: RunLog, state, call: int, wait: bool) -> float:
    """Save the state after `call` host calls; returns the seconds the loop blocked.
    Periodic saves finish writing in the background while training goes on; the last one
    (the end, or an interrupt) is waited for."""
    save_start = time.perf_counter()
    meta = _checkpoint_meta(run, call, log.train_seconds(save_start))
    saver.save(call * run.plan.steps_per_call, run.engine.checkpoint(state), meta, wait=wait)
    blocked = time.perf_counter() - save_start
    log.exclude(blocked)
    return blocked


def due(every: int, call: int, steps_per_call: int) -> bool:
    """A periodic checkpoint at the first host-call boundary past each multiple of `every`."""
    return (
        every > 0
        and call > 0
        and call * steps_per_call // every > (call - 1) * steps_per_call // every
    )


def _checkpoint_meta(run: Run, call: int, train_seconds: float) -> dict:
    config, ticks, layout = run.config, run.plan.ticks, run.plan.layout
    return {
        "env_steps": call * ticks * config.batch_size,
        "calls": call,
        "ticks": ticks,
        "train_seconds": train_seconds,
        "prng_impl": config.prng_impl,
        "devices": run.engine.checkpoint_devices,
        "placement": layout.placement,
        "config": config.to_yaml(),
        "jax_version": jax.__version__,
    }
