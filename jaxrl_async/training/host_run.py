"""A host-env run as the CLI and `trainer.train` start it (env.name=gymnasium:<id> or
envpool:<task>): the executor's rounds grouped into log records (progress bar,
metrics.jsonl, TensorBoard), checkpoints, resume, Ctrl-C and SIGTERM, and summary.json, as
for a JAX env's run.

A round (every actor's trajectory of pipeline.rollout_len steps, one update) is the unit
a host run plans in: the plan's "host calls" are rounds (RunPlan ticks=1), records go
out every train.log_every env steps, and checkpoints land on any round's boundary.

With eval.every, the learner's parameters are evaluated between rounds on envs of the
evaluation's own (`evaluation/host.py`'s HostEvaluation) at the first round boundary past
each multiple of eval.every and after the last round, as a JAX run evaluates at its host
calls' boundaries; the round evaluated ends a record (as a checkpoint's does), which gains
the eval fields, and every other record carries NO_EVAL's. The evaluation draws no key or
seed of training's, so the run trains the same with and without it; its time is left out
of SPS.

Checkpoints hold the learner state (parameters, optimizer, learner hyperparameters), its
update count and the rounds done; an off-policy run's also its replay and the steps its
window carries into the next round (`replay_learner.ReplayCarry`), restored exactly. The
learner's keys are folded with the round and the actors' with the global step, so both
continue exactly; the host envs cannot be saved, so a resumed run restarts them from
fresh seeded resets (`actor.reset_seed`), a recurrent agent's carries from its
`init_carry` (every env at an episode's start, as in a fresh run: the carries belong to
the envs' episodes, which end there), and acts its first pipeline.lag rounds with the
restored parameters. It continues its counts and its learning, not bit for bit.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import numpy as np

from jaxrl_async.config.loader import Config
from jaxrl_async.errors import (
    RunFailure,
    TrainingDiverged,
    TrainingInterrupted,
    UserError,
    first_line,
)
from jaxrl_async.evaluation.host import HostEvaluation
from jaxrl_async.evaluation.results import NO_EVAL
from jaxrl_async.host.executor import (
    Progress,
    Start,
    make_actor_envs,
    make_host_agent,
    run_executor,
)
from jaxrl_async.host.footprint import host_footprint
from jaxrl_async.host.obs_norm import from_saved, initial_stats
from jaxrl_async.host.placement import host_devices, host_placement
from jaxrl_async.host.replay_learner import ReplayCarry, ReplayLearner
from jaxrl_async.host.saved import saved_state
from jaxrl_async.pipeline.footprint import check_fits
from jaxrl_async.pipeline.layout import Layout
from jaxrl_async.run import checkpoint as ckpt
from jaxrl_async.run import rundir
from jaxrl_async.run.compile_cache import configure_compile_cache
from jaxrl_async.run.divergence import DivergenceGuard, param_abs_max
from jaxrl_async.run.interrupts import interrupts_between_calls
from jaxrl_async.run.sinks import RunFileError
from jaxrl_async.training.log import RunLog
from jaxrl_async.training.loop import due
from jaxrl_async.training.plan import RunPlan, check_work_left
from jaxrl_async.training.result import TrainResult
from jaxrl_async.training.summary import RunSummary, write_summary

# Per-round keys of the executor's records that are not metrics to average.
_NOT_LOGGED = ("round", "env_steps", "versions", "episode_return", "updates")


def plan_host(config: Config, run_dir: Path | None, resume: bool) -> RunPlan:
    """A host run's plan: one round per "host call", the learner on one device."""
    placement, devices = host_placement(config), len(set(host_devices(config)))
    why = "host envs: the actors' policy and the learner"
    layout = Layout(devices, placement, devices - 1, jax.default_backend(), why, why)
    if not resume:
        return RunPlan(layout, 1, config.num_updates, config.batch_size)
    if run_dir is None:
        raise UserError("resuming needs the run directory")
    point = rundir.resume_point(run_dir, config)
    check_work_left(run_dir, point, config.num_updates, config.batch_size, config.train.total_steps)
    return RunPlan(layout, 1, config.num_updates, config.batch_size, point)


class Boundaries:
    """What happens between rounds, in the learner's thread: a log record every
    train.log_every env steps and at the end, an evaluation every eval.every (and at the
    end), a checkpoint every checkpoint.every."""

    def __init__(
        self,
        config: Config,
        plan: RunPlan,
        log: RunLog,
        saver: ckpt.Checkpointer | None,
        evaluation: HostEvaluation | None = None,
    ):
        self.config, self.plan, self.log, self.saver = config, plan, log, saver
        self.evaluation = evaluation
        self.evaluated: dict | None = None  # the next record's eval fields
        self.log_rounds = max(1, config.train.log_every // plan.batch)
        self.pending: list[dict] = []
        self.saved = self.rounds = plan.start_call  # rounds in the newest checkpoint, done
        self.checkpoint_seconds = 0.0
        self.guard = DivergenceGuard(config.train.nan_policy, 1, plan.batch, 1, log.warn)
        self._abs_max = jax.jit(param_abs_max)

    def __call__(self, progress: Progress, record: dict) -> None:
        metrics = {k: v for k, v in record.items() if k not in _NOT_LOGGED}
        metrics["param_abs_max"] = float(self._abs_max(progress.state.params))
        self.pending.append({**metrics, "policy_lag_max": metrics["policy_lag"]})
        rounds = self.rounds = progress.rounds
        self._check(rounds, metrics)  # before this round's state can be saved
        last = rounds == self.plan.num_calls
        evaluate = last or due(self.config.eval.every, rounds, self.plan.batch)
        if self.evaluation is not None and evaluate:
            self.evaluate(progress)
        if rounds % self.log_rounds == 0 or last or self.evaluated is not None:
            self.flush(rounds)
        if due(self.config.checkpoint.every, rounds, self.plan.batch):
            self.save(progress, wait=rounds == self.plan.num_calls)

    def _check(self, rounds: int, metrics: dict) -> None:
        try:
            self.guard.check(rounds, {k: [v] for k, v in metrics.items()})
        except TrainingDiverged as e:
            self.flush(rounds)  # the record that diverged, in metrics.jsonl
            if self.saver is not None and self.saved > 0:
                e.checkpoint = self.saver.directory / str(self.saved * self.plan.batch)
            raise

    def evaluate(self, progress: Progress) -> None:
        """The learner's parameters after `progress.rounds` rounds, evaluated (with the
        observation statistics published with them); the time is left out of SPS."""
        assert self.evaluation is not None
        started = time.perf_counter()
        try:
            self.evaluated = self.evaluation(progress.state.params, progress.obs_stats)
        except Exception as e:  # noqa: BLE001  (an env may raise anything; one line, resumable)
            raise RunFailure(
                f"evaluation env {self.config.env.name} raised {type(e).__name__}: {first_line(e)}"
            ) from None
        self.log.exclude(time.perf_counter() - started)

    def flush(self, rounds: int | None = None) -> None:
        if self.pending:
            stacked = {k: np.asarray([m[k] for m in self.pending]) for k in self.pending[0]}
            extra = None if self.evaluation is None else (self.evaluated or NO_EVAL)
            self.log.log(self.rounds if rounds is None else rounds, stacked, extra)
            self.pending, self.evaluated = [], None

    def save(self, progress: Progress, wait: bool) -> None:
        """A checkpoint after `progress.rounds` rounds (metrics.jsonl reaches it first)."""
        if self.saver is None or progress.rounds <= self.saved:
            return
        self.flush(progress.rounds)
        started = time.perf_counter()
        state = saved_state(progress.state, progress.updates, progress.replay, progress.obs_stats)
        meta = {
            "env_steps": progress.rounds * self.plan.batch,
            "calls": progress.rounds,
            "ticks": 1,
            "train_seconds": self.log.train_seconds(started),
            "prng_impl": self.config.prng_impl,
            "devices": 1,  # the learner's: a host run's pipeline.devices
            "placement": self.plan.layout.placement,
            "config": self.config.to_yaml(),
            "jax_version": jax.__version__,
        }
        self.saver.save(progress.rounds * self.plan.batch, state, meta, wait=wait)
        self.saved = progress.rounds
        blocked = time.perf_counter() - started
        self.checkpoint_seconds += blocked
        self.log.exclude(blocked)


def _start(config: Config, agent, spec, plan: RunPlan, run_dir: Path | None) -> Start:
    """A fresh learner state, or the checkpoint's restored into its layout."""
    key = jax.random.key(config.train.seed, impl=config.prng_impl)
    state = jax.jit(agent.init)(jax.random.fold_in(key, 0))
    if plan.point is None:
        return Start(state)
    assert run_dir is not None
    replay = None
    if agent.data == "replay":
        replay = ReplayLearner(agent, config, spec).template(plan.point.calls)
    stats = initial_stats(spec.obs_shape) if config.env.normalize_obs else None
    like = saved_state(state, 0, replay, stats)
    restored, _ = ckpt.restore(rundir.checkpoint_dir(run_dir), like, step=plan.point.step)
    rundir.write_atomic(run_dir / "config.yaml", config.to_yaml())
    rundir.write_records(run_dir, plan.point.records)
    if replay is not None:
        saved = restored["replay"]
        replay = ReplayCarry(saved["replay"], saved.get("window"))
    if stats is not None:
        stats = from_saved(restored["obs_stats"])
    updates = int(restored["updates"])
    return Start(restored["learner"], updates, plan.point.calls, replay, stats)


def train_host_run(
    config: Config,
    *,
    run_dir: str | Path | None = None,
    callbacks: Sequence[Callable[[dict], None]] = (),
    resume: bool = False,
    stop: threading.Event | None = None,
):
    """Train a host-env config as `trainer.train` does a JAX env's: a TrainResult.

    Raises TrainingInterrupted after saving on Ctrl-C / SIGTERM (or `stop`, set from
    another thread), and an ActorError (a RunFailure of one line) when an env fails or
    stalls (env.stall_seconds: an ActorStalled); checkpoints already written stay.
    """
    wall_start = time.perf_counter()
    configure_compile_cache(config.train.compile_cache)
    run_dir = None if run_dir is None else Path(run_dir)
    plan, envs, agent, start, evaluation = _open(config, run_dir, resume)
    saver = rundir.checkpointer(run_dir, config.checkpoint.keep)
    log = RunLog(config, plan, run_dir, callbacks, True)
    boundaries = Boundaries(config, plan, log, saver, evaluation)
    stop = stop if stop is not None else threading.Event()
    # metrics.jsonl or summary.json that cannot be written: one line, resumable.
    with rundir.naming_intact(run_dir):
        try:
            with interrupts_between_calls(on_signal=stop.set):
                result = run_executor(
                    config,
                    agent,
                    envs,
                    stop=stop,
                    start=start,
                    hooks=[boundaries],
                    warn=log.warn,
                )
            final = _final_progress(start, result)
            boundaries.flush(final.rounds)
            boundaries.save(final, wait=True)
        except RunFailure as e:
            if not isinstance(e, RunFileError):  # metrics.jsonl itself may be what failed
                boundaries.flush()
            e.run_dir = run_dir if saver is not None and saver.steps() else None
            raise
        finally:
            log.close()
            if saver is not None:
                saver.close()
            if evaluation is not None:
                evaluation.close()
        if result["stopped_early"]:  # resumable where a checkpoint was saved (not before round 1)
            saved = saver is not None and boundaries.saved > 0
            raise TrainingInterrupted(final.rounds * plan.batch, run_dir if saved else None)
        summary = summarize_host(config, plan, result, wall_start, boundaries)
        return _finish(log, result, summary, run_dir)


def _final_progress(start: Start, result: dict) -> Progress:
    """Where the executor's result leaves the run: its state after every round so far."""
    rounds = start.round + result["rounds"]
    return Progress(
        result["state"], result["updates"], rounds, [], result["replay"], result["obs_stats"]
    )


def _open(config: Config, run_dir: Path | None, resume: bool):
    """(plan, envs, agent, start, evaluation), checked before the run directory is
    written; evaluation None without eval.every."""
    plan = plan_host(config, run_dir, resume)
    if plan.point is None and run_dir is not None and run_dir.exists() and any(run_dir.iterdir()):
        raise UserError(f"run directory {run_dir} exists and is not empty")
    envs = make_actor_envs(config)
    try:
        agent = make_host_agent(config, envs[0].spec)
        # refused before the learner's state or replay is allocated
        check_fits(host_footprint(config, agent, envs[0].spec), host_devices(config)[1:])
        start = _start(config, agent, envs[0].spec, plan, run_dir)
        evaluation = HostEvaluation(config, agent) if config.eval.every > 0 else None
    except BaseException:
        for env in envs:
            env.close()
        raise
    if plan.point is None and run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        rundir.write_atomic(run_dir / "config.yaml", config.to_yaml())
    return plan, envs, agent, start, evaluation


def _finish(log: RunLog, result: dict, summary: RunSummary, run_dir: Path | None):
    """Write summary.json, print the closing line, return the TrainResult."""
    fields = write_summary(summary, run_dir, log.progress.write)
    return TrainResult(
        state=result["state"], metrics=log.metrics(), summary=fields, run_dir=run_dir
    )


def summarize_host(
    config: Config, plan: RunPlan, result: dict, wall_start: float, b: Boundaries
) -> RunSummary:
    """The RunSummary of a host run: the fields of a JAX env's, and the executor's own."""
    evaluation, records = b.evaluation, b.log.records
    eval_seconds = 0.0 if evaluation is None else evaluation.seconds
    eval_compile_seconds = 0.0 if evaluation is None else evaluation.compile_seconds
    # The executor's SPS times the rounds after the first, whose hooks ran every
    # evaluation: their time (compile included) is left out, as a JAX run leaves it out.
    sps, timed = result["sps"], (result["rounds"] - 1) * plan.batch
    if evaluation is not None and timed > 0 and math.isfinite(sps):
        sps = timed / (timed / sps - eval_seconds - eval_compile_seconds)
    last_eval = records[-1].get("eval_return_mean", math.nan) if records else math.nan
    return RunSummary(
        engine="host",
        config=config.name,
        env=config.env.name,
        agent=config.agent.name,
        seed=config.train.seed,
        env_steps=plan.num_updates * plan.batch,
        updates=result["updates"],
        num_seeds=1,
        resumed_from=None if plan.point is None else plan.point.step,
        final_return=result["final_return"],
        actor_threads=result["actor_threads"],
        lag=result["lag"],
        sps=sps,
        train_seconds=result["train_seconds"],
        compile_seconds=result["compile_seconds"],
        policy_lag=result["policy_lag"],
        policy_lag_max=result["policy_lag_max"],
        learner_wait_seconds=result["learner_wait_seconds"],
        learn_seconds=result["learn_seconds"],
        actor_env_seconds=result["actor_env_seconds"],
        actor_policy_seconds=result["actor_policy_seconds"],
        checkpoint_seconds=b.checkpoint_seconds,
        # Compiling the evaluation's policy is not in compile_seconds (in train_seconds).
        eval_return_mean=None if evaluation is None or not math.isfinite(last_eval) else last_eval,
        eval_seconds=eval_seconds,
        eval_compile_seconds=eval_compile_seconds,
        wall_seconds=time.perf_counter() - wall_start,
        jax_version=jax.__version__,
        devices=[str(d) for d in dict.fromkeys(host_devices(config))],  # actors', learner's
        placement=host_placement(config),
        processes=1,
        xla_flags=os.environ.get("XLA_FLAGS", ""),
        warnings=b.log.warnings,
    )
