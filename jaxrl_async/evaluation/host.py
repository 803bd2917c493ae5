"""Evaluation of a host-env run (`jaxrl-async eval`, and eval.every while it trains): a
policy on fresh host envs, the first episode of each of eval.episodes envs (as for a JAX
env's run), its return the raw game score.

The envs reset from seed 10**6 + `seed`'s own range, never a training env's seed; a
greedy evaluation acts with `agent.greedy`, a sampled one with `agent.act`. A recurrent
agent's carry starts each env at its `init_carry` and follows it through the episode,
as the actor's does in training. Under env.normalize_obs the policy sees observations
normalised by the run's statistics (the checkpoint's, or the learner's now), frozen.

`evaluate_host` evaluates the checkpoint (`jaxrl-async eval`), `HostEvaluation` the
learner's current parameters between a run's rounds (eval.every, `training/host_engine.py`);
both play `play_episodes`, with the same seeds and keys, so a periodic evaluation at S env
steps gives the numbers `jaxrl-async eval` gives for a checkpoint at S. Every evaluation
resets its envs from the same seeds: two evaluations differ by their parameters only.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.config.loader import Config
from jaxrl_async.errors import ConfigError
from jaxrl_async.evaluation.results import eval_result, eval_settings, summarize
from jaxrl_async.host.by_name import make_run_env
from jaxrl_async.host.executor import make_host_agent
from jaxrl_async.host.obs_norm import ObsStats, from_saved, initial_stats, normalize
from jaxrl_async.host.saved import saved_state
from jaxrl_async.run import checkpoint as ckpt
from jaxrl_async.run import rundir
from jaxrl_async.types import ActorClock, Memory

EVAL_SEED_OFFSET = 10**6  # eval envs reset from seeds no training run of < 1M envs uses
MAX_STEPS = 10_000  # eval.max_steps=0 caps an episode here when the env has no limit


def _policy(agent, mode: str, seed: int, envs: int):
    """policy(params, memory, obs, step) -> (carry, action), jitted: the greedy action or
    a draw (`memory` the envs' Memory; None, and the carry None, for a memoryless agent)."""
    if mode == "greedy":
        agent_greedy = agent.greedy
        if agent_greedy is None:
            raise ConfigError("this agent has no greedy action; evaluate with --mode sample")

        def greedy(params, memory, obs, step):
            carry, episode_start = _split(memory)
            return agent_greedy(params, carry, obs, episode_start)

        return jax.jit(greedy)
    key = jax.random.fold_in(jax.random.key(seed), 3)
    index = jnp.arange(envs, dtype=jnp.int32)

    def sample(params, memory, obs, step):
        keys = jax.vmap(jax.random.fold_in, (None, 0))(jax.random.fold_in(key, step), index)
        carry, episode_start = _split(memory)
        clock = ActorClock(step * envs, index, envs)
        acted = agent.act(params, carry, obs, episode_start, keys, clock)
        return acted.carry, acted.action

    return jax.jit(sample)


def _split(memory: Memory | None) -> tuple:
    """(the carry, the episode-start flags) of the envs' Memory; (None, None) without."""
    return (None, None) if memory is None else tuple(memory)


def make_eval_env(config: Config):
    """The eval.episodes host envs an evaluation of `config`'s run steps (not a training
    env: their seeds are EVAL_SEED_OFFSET's), masked by env.mask_obs as training's are."""
    return make_run_env(config.env, config.eval.episodes)


class Players(NamedTuple):
    """What an evaluation holds fixed: its N host envs, the agent, its policy (`_policy`'s
    for N envs and `seed`), the seed and eval.max_steps (0: MAX_STEPS)."""

    env: Any
    agent: Any
    policy: Callable
    seed: int
    max_steps: int


def make_players(config: Config, env, agent, seed: int) -> Players:
    """The Players of an evaluation of `config`'s run on `env` (`make_eval_env`'s)."""
    policy = _policy(agent, config.eval.mode, seed, env.num_envs)
    return Players(env, agent, policy, seed, config.eval.max_steps)


def play_episodes(
    players: Players, params, obs_stats: ObsStats | None, watch: Callable | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(returns [N], lengths [N]) of the first episode of each of the N envs, reset from
    EVAL_SEED_OFFSET + seed * N, acting with the policy on `params`, the observations
    normalised by `obs_stats` (None: not normalised), each episode cut at max_steps with
    its return so far. `watch(env, running)` is called before every step with the envs
    whose first episode still runs (`running` [N] bool): a video's frames
    (`host_video.py`)."""
    env, agent, policy, seed, max_steps = players
    n = env.num_envs
    seen = (lambda o: o) if obs_stats is None else (lambda o: normalize(obs_stats, o))
    returns, lengths = np.zeros(n), np.zeros(n, np.int64)
    so_far = np.zeros(n)  # the env's rewards, for an episode cut at the cap
    finished = np.zeros(n, bool)
    obs, memory = env.reset(EVAL_SEED_OFFSET + seed * n), agent.initial_memory(n)
    for t in range(max_steps or MAX_STEPS):
        if watch is not None:
            watch(env, ~finished)
        carry, action = policy(params, memory, seen(obs), np.int32(t))
        out = env.step(np.asarray(action))
        new_episode = out.terminated | out.truncated  # as the training actor resets
        memory = None if memory is None else Memory(carry, new_episode)
        so_far += np.where(out.valid, out.reward, 0.0)
        ended = out.done & ~finished
        returns[ended], lengths[ended] = out.episode_return[ended], out.episode_length[ended]
        finished |= out.done
        if finished.all():
            break
        obs = out.obs
    unfinished = ~finished  # cut at the cap: the return so far
    returns[unfinished], lengths[unfinished] = so_far[unfinished], t + 1
    return returns, lengths


def evaluate_host(
    config: Config, run_dir: Path, seed: int, watch: Callable | None = None
) -> tuple[int, np.ndarray, np.ndarray]:
    """(checkpoint step, returns [N], lengths [N]) of the run's latest checkpoint
    (`play_episodes`, `watch` its)."""
    env = make_eval_env(config)
    try:
        agent = make_host_agent(config, env.spec)
        learner = jax.jit(agent.init)(jax.random.key(0, impl=config.prng_impl))
        norm = initial_stats(env.spec.obs_shape) if config.env.normalize_obs else None
        like = saved_state(learner, 0, obs_stats=norm)
        step = ckpt.read_meta(rundir.checkpoint_dir(run_dir))[0]
        # The learner (and statistics) alone: an off-policy run's replay is not needed.
        state, _ = ckpt.restore(rundir.checkpoint_dir(run_dir), like, step=step, part=True)
        if norm is not None:  # the run's statistics, frozen
            norm = from_saved(state["obs_stats"])
        returns, lengths = play_episodes(
            make_players(config, env, agent, seed), state["learner"].params, norm, watch
        )
    finally:
        env.close()
    return step, returns, lengths


class HostEvaluation:
    """A host run's periodic evaluation (eval.every): its eval.episodes envs, built once,
    and its policy; a call evaluates the learner's current parameters (`play_episodes`,
    seed train.seed, as `jaxrl-async eval` evaluates a checkpoint) and returns the log
    record's fields (`results.summarize`). `seconds` is the time spent evaluating but the
    policy's compile, `compile_seconds` that compile (its first call, one step included).
    Refuses eval.mode=greedy for an agent with no greedy action (a ConfigError) when built."""

    def __init__(self, config: Config, agent):
        self.seconds = self.compile_seconds = 0.0
        env = make_eval_env(config)
        try:  # _policy refuses eval.mode=greedy for an agent without a greedy action
            self.players = make_players(config, env, agent, config.train.seed)
        except BaseException:
            env.close()
            raise
        self._compiled = False
        self._timed = self.players._replace(policy=self._policy)

    def _policy(self, *args):
        """The policy; its first call (its compile, and one step) timed."""
        if self._compiled:
            return self.players.policy(*args)
        started = time.perf_counter()
        out = jax.block_until_ready(self.players.policy(*args))
        self.compile_seconds += time.perf_counter() - started
        self._compiled = True
        return out

    def __call__(self, params, obs_stats: ObsStats | None) -> dict:
        started, compiling = time.perf_counter(), self.compile_seconds
        returns, lengths = play_episodes(self._timed, params, obs_stats)
        spent = time.perf_counter() - started
        self.seconds += spent - (self.compile_seconds - compiling)
        return summarize(returns, lengths)

    def close(self) -> None:
        self.players.env.close()


def evaluate_host_run(
    run_dir: Path, config: Config, episodes: int | None, mode: str | None, seed: int | None
) -> dict:
    """`evaluate.evaluate_run` for a host-env run (the same result keys)."""
    eval_config = eval_settings(config.eval, episodes, mode)
    seed = config.train.seed if seed is None else seed
    step, returns, lengths = evaluate_host(
        dataclasses.replace(config, eval=eval_config), run_dir, seed
    )
    return eval_result(run_dir, step, eval_config, seed, (returns, lengths))
