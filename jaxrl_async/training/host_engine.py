"""The engine of a host env's run (env.name=gymnasium:<id>, envpool:<task>, or `train`'s
`env=` factory): actor threads step the envs and stream version-tagged rounds through
bounded queues to the learner (`host/executor.py`'s Executor), a host call one round.

A round (every actor's trajectory of pipeline.rollout_len steps, one update) is the unit
a host run plans in: the plan's host calls are rounds (RunPlan ticks=1) and its records
group `plan.log_calls` of them (train.log_every env steps), so checkpoints, evaluations
and a Ctrl-C's stop land on any round's boundary. The first round compiles the policy
and the learner while it steps: its time is the run's compile_seconds, and its steps are
left out of SPS.

With eval.every the learner's parameters are evaluated between rounds on envs of the
evaluation's own (`evaluation/host.py`'s HostEvaluation), with the observation statistics
published with them; it draws no key or seed of training's, so the run trains the same
with and without it.

Checkpoints hold the learner state (parameters, optimizer, learner hyperparameters), its
update count; an off-policy run's also its replay and the steps its window carries into
the next round (`replay_learner.ReplayCarry`), an env.normalize_obs run's its statistics,
all restored exactly. The learner's keys are folded with the round and the actors' with
the global step, so both continue exactly; the host envs cannot be saved, so a resumed
run restarts them from fresh seeded resets (`actor.reset_seed`), a recurrent agent's
carries from its `init_carry`, and acts its first pipeline.lag rounds with the restored
parameters. It continues its counts and its learning, not bit for bit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

from jaxrl_async.config.host_devices import host_learner_devices
from jaxrl_async.config.loader import Config
from jaxrl_async.errors import RunFailure, first_line
from jaxrl_async.evaluation.host import HostEvaluation
from jaxrl_async.host.executor import (
    Executor,
    Progress,
    Start,
    make_actor_envs,
    make_host_agent,
)
from jaxrl_async.host.footprint import host_footprint
from jaxrl_async.host.obs_norm import from_saved, initial_stats
from jaxrl_async.host.placement import host_devices
from jaxrl_async.host.processes import processes
from jaxrl_async.host.replay_learner import ReplayCarry, ReplayLearner
from jaxrl_async.host.round_times import ACTOR_TIMES, CPU_FIGURES
from jaxrl_async.host.saved import saved_state
from jaxrl_async.host.seeds import batched, fold, run_key, run_seeds
from jaxrl_async.pipeline.footprint import check_fits
from jaxrl_async.run import checkpoint as ckpt
from jaxrl_async.run import distributed, rundir
from jaxrl_async.run.divergence import param_abs_max
from jaxrl_async.training.engine import Advanced, EngineKind, Untimed
from jaxrl_async.training.hparams import RunGroup, learner_with_hparams
from jaxrl_async.training.plan import RunPlan

# Per-round keys of the executor's records that are not metrics to average.
_NOT_LOGGED = ("round", "env_steps", "versions", "episode_return", "updates")


class HostEngine:
    """A host env's run (`engine.Engine`): see the module's docstring."""

    kind: EngineKind = "host"

    def __init__(
        self,
        config: Config,
        plan: RunPlan,
        group: RunGroup | None = None,
        stop: threading.Event | None = None,
    ):
        self.config, self.plan, self.group = config, plan, group
        self.seeds = run_seeds(config, None if group is None else group.seeds)
        self.stop = stop if stop is not None else threading.Event()
        self.on_interrupt = self.stop.set
        # actors', learner's; over several processes the mesh's, the same list in each
        # (every process's actors act on its own device of the mesh)
        devices = host_devices(config)
        self.devices = list(dict.fromkeys(devices if processes() == 1 else devices[1:]))
        self.checkpoint_devices = host_learner_devices(config)  # the learner mesh's
        self.compile_seconds = self.restore_seconds = 0.0
        self.executor: Executor | None = None
        self.envs = make_actor_envs(config)
        try:
            self.agent = make_host_agent(config, self.envs[0].spec)
            # refused before the learner's state or replay is allocated
            check_fits(
                host_footprint(config, self.agent, self.envs[0].spec), host_devices(config)[1:]
            )
            self.evaluation = HostEvaluation(config, self.agent) if config.eval.every > 0 else None
        except BaseException:
            self._close_envs()
            raise

    def start(self, run_dir: Path | None, warn: Callable[[str], None]) -> Progress:
        """The actors started from a fresh learner state, or from the resume point's
        checkpoint restored into its layout; the state the loop carries is the
        executor's Progress."""
        start = self._restore(run_dir) if self.plan.point is not None else None
        if start is None and self.group is not None and self.group.hparams:
            start = self._with_hparams(self.group.hparams)
        self.executor = Executor(
            self.config, self.agent, self.envs, start, stop=self.stop, warn=warn, seeds=self.seeds
        )
        self._abs_max = jax.jit(batched(param_abs_max, self.seeds))
        return self.executor.progress()

    def _fresh(self):
        """A fresh learner state (every seed-batched run's)."""
        key = fold(run_key(self.config, self.seeds), 0)
        return jax.jit(batched(self.agent.init, self.seeds))(key)

    def _with_hparams(self, hparams) -> Start:
        """A fresh start whose runs learn with a sweep group's hyperparameters."""
        return Start(learner_with_hparams(self._fresh(), hparams))

    def _restore(self, run_dir: Path | None) -> Start:
        assert run_dir is not None and self.plan.point is not None
        config, agent, spec, point = self.config, self.agent, self.envs[0].spec, self.plan.point
        state, runs = self._fresh(), None if self.seeds is None else len(self.seeds)
        replay = None
        if agent.data == "replay":
            replay = ReplayLearner(agent, config, spec, self.seeds).template(point.calls)
        stats = initial_stats(spec.obs_shape, runs) if config.env.normalize_obs else None
        like = saved_state(state, 0, replay, stats)
        started = time.perf_counter()
        restored, _ = ckpt.restore(rundir.checkpoint_dir(run_dir), like, step=point.step)
        self.restore_seconds = time.perf_counter() - started
        if replay is not None:
            saved = restored["replay"]
            replay = ReplayCarry(saved["replay"], saved.get("window"))
        if stats is not None:
            stats = from_saved(restored["obs_stats"])
        return Start(restored["learner"], int(restored["updates"]), point.calls, replay, stats)

    def advance(self, state: Progress) -> Advanced | None:
        """The learner's update on the next round of every actor; None once the run
        stops before the round is whole (Ctrl-C, `stop`); an actor's failure or stall
        raises its one-line ActorError."""
        assert self.executor is not None
        first = not self.executor.lags
        started = time.perf_counter()
        stepped = self.executor.step(state)
        if stepped is None:
            self.executor.close()  # raises the failure that stopped it, if one did
            return None
        if first:
            self.compile_seconds = time.perf_counter() - started
        progress, record = stepped
        metrics = {k: v for k, v in record.items() if k not in _NOT_LOGGED}
        metrics["policy_lag_max"] = metrics["policy_lag"]
        # what the divergence check reads of the parameters (each run's, seed-batched)
        metrics["param_abs_max"] = jax.device_get(self._abs_max(progress.state.params))
        if self.seeds is not None:  # each run's [N], one call's [N, 1] as a JAX run's
            runs = len(self.seeds)
            metrics = {k: np.broadcast_to(v, (runs,))[:, None] for k, v in metrics.items()}
        return Advanced(progress._replace(episode_returns=[]), metrics)

    def checkpoint(self, state: Progress):
        return saved_state(state.state, state.updates, state.replay, state.obs_stats)

    def evaluate(self, state: Progress, env_steps: int) -> dict:
        """The learner's parameters evaluated (with the observation statistics published
        with them); an eval env that raises ends the run in one resumable line."""
        assert self.evaluation is not None
        try:
            # distributed.local: with several processes, this process's copy of the params
            return self.evaluation(distributed.local(state.state.params), state.obs_stats)
        except Exception as e:  # noqa: BLE001  (an env may raise anything; one line, resumable)
            raise RunFailure(
                f"evaluation env {self.config.env.name} raised {type(e).__name__}: {first_line(e)}"
            ) from None

    def untimed(self) -> Untimed:
        """The first round compiles the policy and the learner while it steps; a host
        run's periodic evaluation compiles its policy at its first call."""
        eval_compile = 0.0 if self.evaluation is None else self.evaluation.compile_seconds
        if self.executor is None or not self.executor.lags:
            return Untimed(0, eval_compile)
        return Untimed(self.plan.batch, self.compile_seconds + eval_compile)

    def result_state(self, state: Progress):
        return state.state  # the learner's state

    def closing_lines(self) -> list[str]:
        return []

    def summary_fields(self, state: Progress) -> dict:
        stats = {} if self.executor is None else self.executor.stats()
        keys = ("learner_wait_seconds", "learn_seconds", *ACTOR_TIMES, *CPU_FIGURES)
        return {
            "updates": state.updates,
            "actor_threads": len(self.envs),
            "actor_processes": self.config.pipeline.actor_processes,
            "lag": self.config.pipeline.lag,
            "policy_lag": stats.get("policy_lag"),
            "policy_lag_max": stats.get("policy_lag_max"),
            **{k: stats.get(k) for k in keys},
        }

    def close(self) -> None:
        """Stop the actors (they close their envs) and the evaluation's envs; re-raise an
        actor's failure."""
        try:
            if self.executor is not None:
                self.executor.close()
            else:
                self._close_envs()
        finally:
            if self.evaluation is not None:
                self.evaluation.close()

    def _close_envs(self) -> None:
        for env in self.envs:
            env.close()
