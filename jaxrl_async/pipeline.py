"""The tick: act in every env for a rollout, then learn from it, as one XLA program.

`tick(state) -> (state, metrics)` is scanned K times per host call by
`make_chunk`; the host compiles that chunk once (`compile_chunk`, state donated)
and calls it until the run is done. Everything here is a pure function of a
PipelineState pytree.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl_async.agents.base import Agent


class Transition(NamedTuple):
    """One env step of every env; a trajectory stacks them time-major [T, B, ...]."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array  # stops bootstrapping
    truncated: jax.Array  # ends the episode, bootstraps from next_obs
    next_obs: jax.Array  # the observation after the step, before any auto-reset
    extras: dict  # what the actor recorded (log-probabilities, raw actions, ...)


@struct.dataclass
class PipelineState:
    learner: Any
    env_state: Any
    obs: jax.Array  # [B, ...] the observation each env shows now
    key: jax.Array
    updates: jax.Array  # learner updates done so far


class Pipeline(NamedTuple):
    init: Callable[[jax.Array], PipelineState]
    tick: Callable[[PipelineState], tuple[PipelineState, dict]]
    rollout: Callable  # (params, env_state, obs, key) -> (env_state, obs, traj, episode stats)


def make_pipeline(agent: Agent, env, env_params, rollout_len: int, unroll: int = 1) -> Pipeline:
    """`env` is batched (a VecEnv, possibly wrapped); its info carries episode statistics."""

    def rollout(params, env_state, obs, key):
        def step(carry, step_key):
            env_state, obs = carry
            act_key, env_key = jax.random.split(step_key)
            action, extras = agent.act(params, obs, act_key)
            next_obs, env_state, reward, terminated, truncated, info = env.step(
                env_key, env_state, action, env_params)
            transition = Transition(obs, action, reward, terminated, truncated,
                                    info["final_observation"], extras)
            episodes = (info["episode_done"], info["episode_return"], info["episode_length"])
            return (env_state, next_obs), (transition, episodes)

        (env_state, obs), (traj, (done, ret, length)) = jax.lax.scan(
            step, (env_state, obs), jax.random.split(key, rollout_len), unroll=unroll)
        stats = {"episodes": done.sum(dtype=jnp.int32),
                 "episode_return_sum": ret.sum(dtype=jnp.float32),
                 "episode_length_sum": length.sum(dtype=jnp.float32)}
        return env_state, obs, traj, stats

    def init(key):
        reset_key, agent_key, key = jax.random.split(key, 3)
        obs, env_state = env.reset(reset_key, env_params)
        return PipelineState(agent.init(agent_key), env_state, obs, key, jnp.int32(0))

    def tick(state: PipelineState):
        key, rollout_key, learn_key = jax.random.split(state.key, 3)
        env_state, obs, traj, stats = rollout(state.learner.params, state.env_state, state.obs,
                                              rollout_key)
        learner, metrics = agent.learn(state.learner, traj, learn_key)
        state = PipelineState(learner, env_state, obs, key, state.updates + 1)
        return state, {**metrics, **stats}

    return Pipeline(init=init, tick=tick, rollout=rollout)


def make_chunk(tick, num_ticks: int):
    """K ticks in one program; metrics come back stacked [K]."""

    def chunk(state):
        return jax.lax.scan(lambda s, _: tick(s), state, None, length=num_ticks)

    return chunk


def compile_chunk(chunk, state) -> Callable:
    """Trace and compile ahead of time with the state donated; `state` may be abstract."""
    return jax.jit(chunk, donate_argnums=0).lower(state).compile()


def init_and_compile(pipeline: Pipeline, key, num_ticks: int):
    """(initial state, compiled chunk), compiling the two programs concurrently.

    XLA compiles without holding the GIL, so the chunk (traced from the abstract
    state) compiles in a worker thread while this thread compiles and runs init.
    Init runs once, so it is compiled at the lowest optimisation level.
    """
    init_lowered = jax.jit(pipeline.init).lower(key)
    abstract_state = init_lowered.out_info
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        chunk_future = pool.submit(compile_chunk, make_chunk(pipeline.tick, num_ticks),
                                   abstract_state)
        init = init_lowered.compile(compiler_options={"xla_backend_optimization_level": 0})
        state = init(key)
        chunk = chunk_future.result()
    return jax.block_until_ready(state), chunk


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
