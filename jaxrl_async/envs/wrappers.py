"""Env wrappers, each a gymnax-API env around another.

`EpisodeStatistics` and `MaskObservation` work per env; `VecEnv` vmaps an env over a batch;
`NormalizeObservation` wraps a VecEnv because its running statistics are
shared by the whole batch.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl_async.types import Leaf


class Wrapper:
    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)

    @property
    def default_params(self):
        return self._env.default_params

    def observation_space(self, params):
        return self._env.observation_space(params)

    def action_space(self, params):
        return self._env.action_space(params)


class CastObservation(Wrapper):
    """Casts observations (and info["final_observation"]) to `dtype`."""

    def __init__(self, env, dtype):
        super().__init__(env)
        self.dtype = dtype

    def reset(self, key, params=None):
        obs, state = self._env.reset(key, params)
        return obs.astype(self.dtype), state

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        info = {**info, "final_observation": info["final_observation"].astype(self.dtype)}
        return obs.astype(self.dtype), state, reward, terminated, truncated, info


class MaskObservation(Wrapper):
    """Zeroes the entries `indices` of the last axis of an array observation (and of
    info["final_observation"]): a partially observed variant of an env, e.g. CartPole
    without its velocities (`env.mask_obs=[1,3]`). The observation space is unchanged."""

    def __init__(self, env, indices):
        super().__init__(env)
        self.indices = tuple(int(i) for i in indices)

    def _mask(self, obs):
        return obs.at[..., list(self.indices)].set(0)

    def reset(self, key, params=None):
        obs, state = self._env.reset(key, params)
        return self._mask(obs), state

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        info = {**info, "final_observation": self._mask(info["final_observation"])}
        return self._mask(obs), state, reward, terminated, truncated, info


class EpisodeStatsState(struct.PyTreeNode):
    env_state: Any
    episode_return: jax.Array
    episode_length: jax.Array


class EpisodeStatistics(Wrapper):
    """Adds `episode_return` / `episode_length` of the episode that ended this step to info.

    Both are 0 where no episode ended; `info["episode_done"]` marks where one did.
    """

    def reset(self, key, params=None):
        obs, state = self._env.reset(key, params)
        return obs, EpisodeStatsState(state, jnp.float32(0.0), jnp.int32(0))

    def step(self, key, state, action, params=None):
        obs, env_state, reward, terminated, truncated, info = self._env.step(
            key, state.env_state, action, params
        )
        done = jnp.logical_or(terminated, truncated)
        ret = state.episode_return + reward.astype(jnp.float32)
        length = state.episode_length + 1
        info = {
            **info,
            "episode_done": done,
            "episode_return": jnp.where(done, ret, 0.0),
            "episode_length": jnp.where(done, length, 0),
        }
        state = EpisodeStatsState(env_state, jnp.where(done, 0.0, ret), jnp.where(done, 0, length))
        return obs, state, reward, terminated, truncated, info


class VecEnv(Wrapper):
    """A batch of independent copies of an env, stepped with one key per env.

    Keys come from the caller, one per env, so that a run's numbers do not depend
    on how many devices share the batch (each device steps its slice of it).
    """

    def reset(self, keys, params=None):
        return jax.vmap(self._env.reset, in_axes=(0, None))(keys, params)

    def step(self, keys, state, action, params=None):
        return jax.vmap(self._env.step, in_axes=(0, 0, 0, None))(keys, state, action, params)

    def partition_spec(self, axis: str):
        """Sharding of the batched state: every leaf along its leading (env) axis."""
        return jax.sharding.PartitionSpec(axis)

    def observe(self, state, obs):
        """What an agent sees of `obs`: itself (NormalizeObservation normalises)."""
        return obs

    def obs_stats(self, state):
        """The observation statistics in `state` (None: observations are not normalised)."""
        return None


class NormState(struct.PyTreeNode):
    env_state: Any
    mean: Leaf
    var: Leaf
    count: Leaf


class NormalizeObservation(Wrapper):
    """Running mean/variance statistics of a VecEnv's observations, for normalising them
    (clipped to ±clip).

    Statistics live in the env state (so they are checkpointed with it) and are
    updated with every batch of new observations (parallel Welford merge). With
    `axis_name`, a batch sharded over devices contributes its global moments, so
    every device holds the same statistics.

    reset and step return the RAW observations (as float32); `observe(state, obs)`
    normalises with the statistics in `state`. The pipeline normalises what the actor
    sees and the trajectories on-policy agents learn from with the statistics of that
    step; off-policy agents store raw observations and normalise each sampled batch with
    the current statistics. Stored normalised, a replay would hold observations scaled
    by thousands of different statistics, the same state under different vectors.
    """

    def __init__(
        self, vec_env: VecEnv, clip: float = 10.0, eps: float = 1e-8, axis_name: str | None = None
    ):
        super().__init__(vec_env)
        self.clip, self.eps, self.axis_name = clip, eps, axis_name

    def _mean(self, x):
        x = x.mean(0)
        return x if self.axis_name is None else jax.lax.pmean(x, self.axis_name)

    def _update(self, state: NormState, obs):
        batch_mean = self._mean(obs)
        batch_var = self._mean(jnp.square(obs - batch_mean))
        n = jnp.float32(obs.shape[0])
        if self.axis_name is not None:
            n = n * jax.lax.psum(1, self.axis_name)
        total = state.count + n
        delta = batch_mean - state.mean
        mean = state.mean + delta * n / total
        m2 = state.var * state.count + batch_var * n + delta**2 * state.count * n / total
        return state.replace(mean=mean, var=m2 / total, count=total)

    def normalize(self, state: NormState, obs):
        """`obs` under the statistics in `state` (reads only mean and var: evaluation
        normalises with a training run's statistics, frozen)."""
        z = (obs - state.mean) / jnp.sqrt(state.var + self.eps)
        return jnp.clip(z, -self.clip, self.clip)

    def partition_spec(self, axis: str):
        P = jax.sharding.PartitionSpec
        return NormState(self._env.partition_spec(axis), P(), P(), P())

    def observe(self, state: NormState, obs):
        return self.normalize(state, obs.astype(jnp.float32))

    def obs_stats(self, state: NormState) -> NormState:
        """The statistics alone (replicated, the same for every env)."""
        return NormState(None, state.mean, state.var, state.count)

    def reset(self, key, params=None):
        obs, env_state = self._env.reset(key, params)
        obs = obs.astype(jnp.float32)
        zeros = jnp.zeros(obs.shape[1:], jnp.float32)
        state = NormState(env_state, zeros, jnp.ones_like(zeros), jnp.float32(1e-4))
        return obs, self._update(state, obs)

    def step(self, key, state, action, params=None):
        obs, env_state, reward, terminated, truncated, info = self._env.step(
            key, state.env_state, action, params
        )
        obs = obs.astype(jnp.float32)
        state = self._update(state.replace(env_state=env_state), obs)
        info = {**info, "final_observation": info["final_observation"].astype(jnp.float32)}
        return obs, state, reward, terminated, truncated, info
