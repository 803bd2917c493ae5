"""Tiny pure-JAX environments with known optimal returns, written against the gymnax 1.0 API
without subclassing gymnax: proof that any object with the API trains."""

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import spaces


@struct.dataclass
class MatchState:
    context: jax.Array
    time: jax.Array


@struct.dataclass
class MatchParams:
    episode_length: int = 8


class MatchContext:
    """Each step shows one of two contexts (one-hot); reward 1 for the action equal to it.

    Episodes terminate after `episode_length` steps, so the optimal return is
    `episode_length` and a uniform policy gets half of it.
    """

    @property
    def default_params(self) -> MatchParams:
        return MatchParams()

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (2,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(2)

    def _obs(self, context):
        return jax.nn.one_hot(context, 2, dtype=jnp.float32)

    def reset(self, key, params):
        context = jax.random.bernoulli(key).astype(jnp.int32)
        return self._obs(context), MatchState(context, jnp.int32(0))

    def step(self, key, state, action, params):
        reward = (action == state.context).astype(jnp.float32)
        time = state.time + 1
        terminated = time >= params.episode_length
        context = jax.random.bernoulli(key).astype(jnp.int32)
        next_obs = self._obs(context)
        reset_obs, reset_state = self.reset(key, params)
        new_state = MatchState(context, time)
        state = jax.tree.map(lambda r, s: jnp.where(terminated, r, s), reset_state, new_state)
        obs = jnp.where(terminated, reset_obs, next_obs)
        info: dict[str, Any] = {"final_observation": next_obs}
        return obs, state, reward, terminated, jnp.bool_(False), info
