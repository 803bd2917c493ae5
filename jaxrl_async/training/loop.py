"""A built and started run, and its loop: call the compiled chunk until the plan is done,
and between calls log, evaluate, checkpoint, and stop on Ctrl-C."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from jaxrl_async.config.loader import Config
from jaxrl_async.errors import TrainingDiverged, TrainingInterrupted
from jaxrl_async.evaluation.evaluate import Evaluation
from jaxrl_async.evaluation.results import NO_EVAL
from jaxrl_async.run import checkpoint as ckpt
from jaxrl_async.run import distributed, rundir
from jaxrl_async.run.divergence import DivergenceGuard
from jaxrl_async.run.interrupts import interrupts_between_calls
from jaxrl_async.training.log import RunLog
from jaxrl_async.training.plan import RunPlan


@dataclasses.dataclass
class Built:
    pipeline: Any  # the run's Pipeline (seed-vmapped for num_seeds > 1; the actor's if split)
    learner_pipeline: Any  # split placement: the same pipeline on the learner mesh
    agent: Any
    devices: list
    evaluation: Evaluation | None


@dataclasses.dataclass
class Started:
    state: Any
    chunk: Callable
    compile_seconds: float
    restore_seconds: float
    cache_hits: int
    cache_misses: int


@dataclasses.dataclass
class Run:
    """A built and started run: what the loop and the summary read."""

    config: Config
    plan: RunPlan
    built: Built
    started: Started
    run_dir: Path | None


@dataclasses.dataclass
class LoopTimes:
    loop_seconds: float
    checkpoint_seconds: float  # the loop blocked on saves


def run_loop(run: Run, log: RunLog, saver: ckpt.Checkpointer | None):
    """Call the chunk until the plan is done; returns (final state, LoopTimes).

    Each call is dispatched before the previous call's metrics are logged, so logging
    overlaps training. Evaluations and checkpoints happen at host-call boundaries; an
    interrupt (SIGINT / SIGTERM) saves there and raises TrainingInterrupted.
    """
    config, plan, evaluation = run.config, run.plan, run.built.evaluation
    state, chunk = run.started.state, run.started.chunk
    steps_per_call = plan.steps_per_call
    saved = -1 if plan.point is None else plan.point.calls  # host calls in the newest checkpoint
    checkpoint_seconds = 0.0
    pending = _Pending(log, evaluation, divergence_guard(run, log))
    with interrupts_between_calls() as interrupted, _naming_checkpoint(run, lambda: saved):
        for call in range(plan.start_call, plan.num_calls + 1):
            stop = distributed.any_process(interrupted())  # all processes stop together
            last = call == plan.num_calls
            if (
                evaluation is not None
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
            state, metrics = chunk(state)  # dispatched; runs while we log the last one
            pending.flush()
            pending.hold(call + 1, metrics)
    jax.block_until_ready(state)
    return state, LoopTimes(time.perf_counter() - log.start, checkpoint_seconds)


@contextlib.contextmanager
def _naming_checkpoint(run: Run, saved: Callable[[], int]):
    """What the run's failures inside say of its checkpoints: TrainingDiverged names the
    newest (host calls `saved()`; -1: none), whose state's metrics were all checked; a
    save that failed names the run to resume where an earlier checkpoint is intact."""
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
    """The last call's metrics, logged once the next call is dispatched, with the
    evaluation done at its boundary (every record has the eval keys when evaluating:
    NaN and 0 where not evaluated), then checked for divergence: a checkpoint of that
    call's state is written only after its metrics pass."""

    def __init__(self, log: RunLog, evaluation: Evaluation | None, guard: DivergenceGuard):
        self._log, self._evaluation, self._guard = log, evaluation, guard
        self._item: tuple[int, Any] | None = None
        self._evaluated: dict | None = None

    @property
    def records(self) -> bool:
        return self._item is not None

    def hold(self, calls: int, metrics) -> None:
        self._item = (calls, metrics)

    def evaluate(self, state, env_steps: int) -> None:
        evaluation = self._evaluation
        assert evaluation is not None
        spent = evaluation.seconds
        self._evaluated = evaluation(state, env_steps)
        video = getattr(evaluation, "video", None)  # eval.video: video/periodic.py
        if video is not None:
            self._log.video(env_steps, *video)
        self._log.exclude(evaluation.seconds - spent)

    def flush(self) -> None:
        if self._item is not None:
            extra = None if self._evaluation is None else (self._evaluated or NO_EVAL)
            calls, metrics = self._item[0], jax.device_get(self._item[1])
            self._log.log(calls, metrics, extra)
            self._item = self._evaluated = None
            self._guard.check(calls, metrics)


def _save(run: Run, saver: ckpt.Checkpointer, log: RunLog, state, call: int, wait: bool) -> float:
    """Save the state after `call` host calls; returns the seconds the loop blocked.
    Periodic saves finish writing in the background while training goes on; the last one
    (the end, or an interrupt) is waited for."""
    save_start = time.perf_counter()
    meta = _checkpoint_meta(run, call, log.train_seconds(save_start))
    saver.save(call * run.plan.steps_per_call, state, meta, wait=wait)
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
        "devices": layout.devices,
        "placement": layout.placement,
        "config": config.to_yaml(),
        "jax_version": jax.__version__,
    }
