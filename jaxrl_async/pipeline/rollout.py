"""The actor's loop: every env steps `length` times with one set of parameters.

`make_rollout` returns a pure function, run per device under shard_map on that
device's slice of the envs. Every env draws its randomness from the step key folded
with its global index, so results do not depend on how many devices share the batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_async.pipeline.sharding import AXIS
from jaxrl_async.pipeline.state import PipelineShape
from jaxrl_async.types import ActorClock, Agent, Memory, Transition


def env_index(local_envs: int) -> jax.Array:
    """The global index of each of this device's envs."""
    return jax.lax.axis_index(AXIS) * local_envs + jnp.arange(local_envs)


def env_keys(key, local_envs: int) -> jax.Array:
    """One key per local env: `key` folded with the env's global index."""
    return jax.vmap(jax.random.fold_in, (None, 0))(key, env_index(local_envs))


class RolloutStart(NamedTuple):
    """Where the run stands as a rollout starts: the parameter version that acts (the
    update count it tags the trajectory with) and the env steps of all envs before it
    (they drive the actor's clock)."""

    version: Any = 0
    env_steps: Any = 0


START = RolloutStart()  # a rollout that no run's clock places (version 0, no steps before)


class RolloutParts(NamedTuple):
    """What every step of a rollout holds fixed."""

    agent: Agent
    env: Any  # batched (a VecEnv, possibly wrapped)
    env_params: Any
    num_envs: int  # the global batch
    local_envs: int  # this device's envs
    store_raw: bool  # the trajectory records raw observations (an off-policy agent's)


def make_rollout(agent: Agent, env, env_params, shape: PipelineShape, local_envs: int) -> Callable:
    """rollout(params, env_state, obs, memory, key, start=START) -> (env_state,
    obs, memory, trajectory Transition [T, B, ...], episode stats), T = shape.rollout_len.

    `env` is batched (a VecEnv, possibly wrapped) and reports episode ends, returns and
    lengths in its info; the stats are their sums over the rollout and all devices.
    `local_envs` of the `shape.num_envs` envs are this device's.

    `memory` (a Memory [B, ...], None for a memoryless agent) is the recurrent actor's
    carry and where episodes start; the cell steps inside this scan, so a recurrent
    actor costs no extra program or host round trip. The trajectory records, per step,
    the memory the actor acted from (`Transition.memory`): the learner re-runs its
    sequences from there.

    The env hands out raw observations and `env.observe` turns them into what the agent
    sees (normalised with the running statistics, if the run normalises). The actor
    acts on that; an on-policy trajectory records it too, while an off-policy agent's
    trajectory records the raw observations, which the replay stores (`replay/stage.py`
    normalises each sampled batch with the statistics current when it is drawn).
    """
    parts = RolloutParts(agent, env, env_params, shape.num_envs, local_envs, agent.data == "replay")
    length = shape.rollout_len

    def rollout(params, env_state, obs, memory, key, start: RolloutStart = START):
        (env_state, obs, memory), (traj, (done, ret, ep_length)) = jax.lax.scan(
            functools.partial(rollout_step, parts, params, start),
            (env_state, obs, memory),
            (jax.random.split(key, length), jnp.arange(length)),
            unroll=shape.unroll,
        )
        stats = {
            "episodes": done.sum(dtype=jnp.int32),
            "episode_return_sum": ret.sum(dtype=jnp.float32),
            "episode_length_sum": ep_length.sum(dtype=jnp.float32),
        }
        return env_state, obs, memory, traj, jax.lax.psum(stats, AXIS)

    return rollout


def rollout_step(parts: RolloutParts, params, start: RolloutStart, carry, xs):
    """One step of every env, as a scan body: carry (env_state, obs, memory), xs (step
    key, t) -> (carry, (Transition, (episode_done, episode_return, episode_length)))."""
    agent, env, local_envs, num_envs = parts.agent, parts.env, parts.local_envs, parts.num_envs
    env_state, obs, memory = carry
    step_key, t = xs
    keys = jax.vmap(jax.random.split)(env_keys(step_key, local_envs))
    clock = ActorClock(start.env_steps + t * num_envs, env_index(local_envs), num_envs)
    seen = env.observe(env_state, obs)
    agent_carry, action, extras = agent.act(
        params,
        None if memory is None else memory.carry,
        seen,
        None if memory is None else memory.episode_start,
        keys[:, 0],
        clock,
    )
    next_obs, env_state, reward, terminated, truncated, info = env.step(
        keys[:, 1], env_state, action, parts.env_params
    )
    final_obs = info["final_observation"]
    if not parts.store_raw:  # normalised (if at all) with this step's statistics
        obs, final_obs = seen, env.observe(env_state, final_obs)
    transition = Transition(
        obs,
        action,
        reward,
        terminated,
        truncated,
        final_obs,
        extras,
        jnp.full(reward.shape, start.version, jnp.int32),
        memory,
    )
    if memory is not None:
        memory = Memory(agent_carry, terminated | truncated)
    episodes = (info["episode_done"], info["episode_return"], info["episode_length"])
    return (env_state, next_obs, memory), (transition, episodes)
