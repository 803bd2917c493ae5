"""Evaluation: the first episode of each of N fresh envs, acting greedily or by sampling.

`make_evaluator` builds the pure program (a `lax.while_loop` over vmapped envs until
every env has finished its first episode); `Evaluation` compiles it once for one
device and runs it on a training state, for the host loop's periodic evaluation
and for `jaxrl-async eval RUN_DIR` (`evaluate_run`).

Evaluation never draws from the training run's keys: its key is the run's seed
folded with a stream of its own and the env step count, so a run trains bit for bit
the same with and without it, and evaluating the same checkpoint again with the
same seed repeats the numbers.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async import envs as envs_lib
from jaxrl_async.config.loader import EVAL_MODES, Config, EvalConfig, engine_kind
from jaxrl_async.envs.wrappers import NormalizeObservation, NormState, VecEnv
from jaxrl_async.evaluation.restore import restore_run
from jaxrl_async.evaluation.results import check_one_seed, eval_result, eval_settings, summarize
from jaxrl_async.run import distributed, rundir
from jaxrl_async.types import ActorClock, Agent, Memory

MODES = EVAL_MODES
DEFAULT_MAX_STEPS = 10_000  # the cap for an env that declares no episode limit
EVAL_STREAM = 0x6576616C  # "eval": a key stream the training run never draws from


def episode_limit(env_params, max_steps: int = 0) -> int:
    """`max_steps` if > 0, else the env's own `max_steps_in_episode`, else DEFAULT_MAX_STEPS."""
    if max_steps > 0:
        return int(max_steps)
    limit = getattr(env_params, "max_steps_in_episode", None)
    return int(limit) if limit is not None and int(limit) > 0 else DEFAULT_MAX_STEPS


def eval_key(seed: int, env_steps: int, impl: str | None = None) -> jax.Array:
    """The key of the evaluation at `env_steps` env steps of a run with `seed`."""
    base = jax.random.fold_in(jax.random.key(seed, impl=impl), EVAL_STREAM)
    return jax.random.fold_in(base, int(env_steps) % 2**32)


def obs_stats(env_state) -> NormState | None:
    """The running observation statistics of a training state's env_state (frozen for
    evaluation), or None when the run does not normalise observations. They are
    replicated, the same for every env."""
    if not isinstance(env_state, NormState):
        return None
    return NormState(None, env_state.mean, env_state.var, env_state.count)


class EvalLoop(NamedTuple):
    """The evaluation loop's carry: the step, the envs, and each env's first episode [N]."""

    t: jax.Array
    env_state: Any
    obs: Any
    memory: Any  # Memory [N, ...] (None: a memoryless agent)
    alive: jax.Array  # bool: the first episode still runs
    returns: jax.Array  # float32: its return so far
    lengths: jax.Array  # int32: its length so far


def _per_env(key, index):
    """One key per env [N]: `key` folded with each env's index."""
    return jax.vmap(jax.random.fold_in, (None, 0))(key, index)


def _eval_policy(agent: Agent, mode: str, index):
    """policy(params, memory, obs, key, env_steps) -> (carry, action) for the N envs of
    `index` [N]; a memoryless agent's carry stays None."""
    num_episodes = index.shape[0]

    def policy(params, memory, obs, key, env_steps):
        carry = None if memory is None else memory.carry
        episode_start = None if memory is None else memory.episode_start
        if mode == "greedy":
            assert agent.greedy is not None  # eval_parts refuses greedy mode without one
            return agent.greedy(params, carry, obs, episode_start)
        clock = ActorClock(env_steps, index.astype(jnp.int32), num_episodes)
        acted = agent.act(params, carry, obs, episode_start, _per_env(key, index), clock)
        return acted.carry, acted.action

    return policy


class EvalParts(NamedTuple):
    """What an evaluator holds fixed."""

    agent: Agent
    vec_env: VecEnv
    env_params: Any
    normalizer: NormalizeObservation | None  # None: observations are not normalised
    policy: Callable  # `_eval_policy`'s
    env_index: jax.Array  # int [N]: the envs
    limit: int  # the most steps an episode runs


def make_evaluator(agent: Agent, env, env_params, config: EvalConfig, normalize_obs: bool = False):
    """evaluate(params, key, env_steps, obs_stats=None) -> (returns [N], lengths [N]).

    A pure function (jit it): N = config.episodes copies of the unbatched gymnax-API
    `env`, each reset with its own key, step together until each has ended its FIRST
    episode (terminated or truncated; later episodes after the auto-reset are not
    counted), or `episode_limit(env_params, config.max_steps)` steps have passed: an
    episode still running then counts with its return so far and that length.

    config.mode "greedy" acts with `agent.greedy`; "sample" with `agent.act`, whose clock
    says `env_steps` for every step (a DQN's epsilon is its schedule's value there) and
    env i of N (Ape-X's per-env epsilons). A recurrent agent's carry starts each env at
    its `init_carry` and follows it through the episode, as the actor's does in training.
    With `normalize_obs`, observations are normalised with `obs_stats` (a NormState, see
    `obs_stats`) as the training env did, frozen.
    """
    return functools.partial(
        run_evaluation, eval_parts(agent, env, env_params, config, normalize_obs)
    )


def eval_parts(
    agent: Agent, env, env_params, config: EvalConfig, normalize_obs: bool = False
) -> EvalParts:
    """What `make_evaluator`'s evaluate holds fixed (its arguments checked)."""
    mode, num_episodes = config.mode, config.episodes
    if mode not in MODES:
        raise ValueError(f"evaluation mode must be one of {MODES}, got {mode!r}")
    if mode == "greedy" and agent.greedy is None:
        raise ValueError("this agent has no greedy action; evaluate with mode='sample'")
    if num_episodes < 1:
        raise ValueError(f"num_episodes must be >= 1, got {num_episodes}")
    vec_env = VecEnv(env)
    index = jnp.arange(num_episodes)
    return EvalParts(
        agent,
        vec_env,
        env_params,
        NormalizeObservation(vec_env) if normalize_obs else None,
        _eval_policy(agent, mode, index),
        index,
        episode_limit(env_params, config.max_steps),
    )


class EvalCall(NamedTuple):
    """What one evaluation holds fixed over its steps."""

    params: Any
    act_key: jax.Array
    step_key: jax.Array
    env_steps: jax.Array  # int32 [], for the actor's clock
    obs_stats: NormState | None  # the training run's, frozen (None: not normalised)


def run_evaluation(
    parts: EvalParts, params, key, env_steps, obs_stats: NormState | None = None
) -> tuple[jax.Array, jax.Array]:
    """`make_evaluator`'s evaluate: (returns [N], lengths [N]) of the first episodes."""
    call, loop = start_evaluation(parts, params, key, env_steps, obs_stats)
    loop = jax.lax.while_loop(
        lambda loop: (loop.t < parts.limit) & jnp.any(loop.alive),
        functools.partial(eval_step, parts, call),
        loop,
    )
    return loop.returns, loop.lengths


def start_evaluation(
    parts: EvalParts, params, key, env_steps, obs_stats: NormState | None = None
) -> tuple[EvalCall, EvalLoop]:
    """The evaluation's fixed inputs and its loop before the first step (envs reset)."""
    if parts.normalizer is not None and obs_stats is None:
        raise ValueError("normalize_obs needs the training run's obs_stats")
    num_episodes = parts.env_index.shape[0]
    reset_key, step_key, act_key = jax.random.split(key, 3)
    call = EvalCall(params, act_key, step_key, jnp.asarray(env_steps, jnp.int32), obs_stats)
    obs, env_state = parts.vec_env.reset(_per_env(reset_key, parts.env_index), parts.env_params)
    loop = EvalLoop(
        jnp.int32(0),
        env_state,
        obs,
        parts.agent.initial_memory(num_episodes),
        jnp.ones(num_episodes, bool),
        jnp.zeros(num_episodes, jnp.float32),
        jnp.zeros(num_episodes, jnp.int32),
    )
    return call, loop


def eval_step(parts: EvalParts, call: EvalCall, loop: EvalLoop) -> EvalLoop:
    """One step of every env, as the while loop's body."""
    seen = (
        loop.obs
        if parts.normalizer is None or call.obs_stats is None  # not both: checked on entry
        else parts.normalizer.normalize(call.obs_stats, loop.obs.astype(jnp.float32))
    )
    carry, action = parts.policy(
        call.params, loop.memory, seen, jax.random.fold_in(call.act_key, loop.t), call.env_steps
    )
    obs, env_state, reward, terminated, truncated, _ = parts.vec_env.step(
        _per_env(jax.random.fold_in(call.step_key, loop.t), parts.env_index),
        loop.env_state,
        action,
        parts.env_params,
    )
    ended = terminated | truncated
    return EvalLoop(
        loop.t + 1,
        env_state,
        obs,
        None if loop.memory is None else Memory(carry, ended),
        loop.alive & ~ended,
        loop.returns + jnp.where(loop.alive, reward.astype(jnp.float32), 0.0),
        loop.lengths + loop.alive.astype(jnp.int32),
    )


class Evaluation:
    """An evaluator compiled once for one device, run on training states.

    `start_compile()` compiles it in a worker thread (XLA compiles without the GIL, so
    next to the training program); a call waits for it. `compile_seconds` is the
    compile's own duration, `seconds` the time calls took so far, `last` the fields
    of the latest call.
    """

    def __init__(self, config: Config, agent: Agent, env=None, env_params=None, device=None):
        """Evaluates as `config.eval` says, with keys of `config.train.seed` and
        `config.prng_impl` (`eval_key`)."""
        env, env_params = envs_lib.resolve(config.env, env, env_params)
        self.config = config.eval
        self.seed = config.train.seed
        self.impl = config.prng_impl
        self.device = jax.local_devices()[0] if device is None else device
        self._evaluate = make_evaluator(
            agent, env, env_params, self.config, config.env.normalize_obs
        )
        obs_shape = envs_lib.spec_of(env, env_params).obs_shape
        stats = jax.ShapeDtypeStruct(obs_shape, jnp.float32)
        self._args_like = (
            jax.eval_shape(agent.init, jax.random.key(0, impl=self.impl)).params,
            jax.eval_shape(lambda: eval_key(0, 0, self.impl)),
            jax.ShapeDtypeStruct((), jnp.int32),
            NormState(None, stats, stats, jax.ShapeDtypeStruct((), jnp.float32))
            if config.env.normalize_obs
            else None,
        )
        self._compiled: Any = None
        self._future: concurrent.futures.Future | None = None
        self.compile_seconds = self.seconds = 0.0
        self.last: dict | None = None

    def _compile(self):
        start = time.perf_counter()
        on = jax.sharding.SingleDeviceSharding(self.device)
        args = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=on), self._args_like
        )
        compiled = jax.jit(self._evaluate).lower(*args).compile()
        self.compile_seconds = time.perf_counter() - start
        return compiled

    def start_compile(self) -> None:
        if self._compiled is None and self._future is None:
            pool = concurrent.futures.ThreadPoolExecutor(1)
            self._future = pool.submit(self._compile)
            pool.shutdown(wait=False)

    def wait_compiled(self) -> None:
        if self._compiled is None:
            self.start_compile()
            assert self._future is not None  # start_compile's
            self._compiled = self._future.result()

    def episodes(self, state, env_steps: int) -> tuple[np.ndarray, np.ndarray]:
        """(returns [N], lengths [N]) of the learner's parameters in `state` (a
        PipelineState) at `env_steps` env steps; blocks until they are known."""
        self.wait_compiled()
        jax.block_until_ready(state.learner.params)  # time the evaluation, not training
        start = time.perf_counter()
        args = (
            state.learner.params,
            eval_key(self.seed, env_steps, self.impl),
            jnp.int32(min(env_steps, np.iinfo(np.int32).max)),
            obs_stats(state.env_state),
        )
        # distributed.local: with several processes, this process's copy of the params.
        returns, lengths = jax.device_get(
            self._compiled(*jax.device_put(distributed.local(args), self.device))
        )
        self.seconds += time.perf_counter() - start
        return returns, lengths

    def __call__(self, state, env_steps: int) -> dict:
        """The log-record fields of an evaluation of `state` at `env_steps` env steps."""
        self.last = summarize(*self.episodes(state, env_steps))
        return self.last


def evaluate_run(
    run_dir: str | Path,
    episodes: int | None = None,
    mode: str | None = None,
    seed: int | None = None,
    *,
    env=None,
    env_params=None,
) -> dict:
    """Evaluate the latest checkpoint of a run directory; the result is also written to
    RUN_DIR/eval.json.

    `episodes`, `mode` default to the run's `eval` section, `seed` to its train.seed
    (so with the run's own settings the last checkpoint's numbers repeat the run's
    final evaluation). `env`/`env_params`: the env a run trained on a custom env used.
    Raises a UserError subclass (one line) for a missing run directory, config or
    checkpoint, or one that does not fit the config.
    """
    run_dir = Path(run_dir)
    config = rundir.resume_config(run_dir)
    check_one_seed(run_dir, config.train.num_seeds)
    if engine_kind(config, env) == "host":
        from jaxrl_async.evaluation.host import evaluate_host_run

        result = evaluate_host_run(run_dir, config, episodes, mode, seed)
        (run_dir / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
        return result
    eval_config = eval_settings(config.eval, episodes, mode)
    seed = config.train.seed if seed is None else seed
    step, state, agent, config = restore_run(run_dir, config, env, env_params)
    # The evaluation's own settings: the run's, with the given ones and the checkpoint's PRNG.
    evaluation = Evaluation(
        dataclasses.replace(
            config, eval=eval_config, train=dataclasses.replace(config.train, seed=seed)
        ),
        agent,
        env,
        env_params,
    )
    returns, lengths = evaluation.episodes(state, step)
    result = eval_result(run_dir, step, eval_config, seed, (returns, lengths))
    (run_dir / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
    return result
