"""CartPole whose rewards turn NaN after a set number of steps per env: a divergence
injected at a known update, through `env.name=tests.helpers.poisoned_env:cartpole`."""

from typing import Any

import jax.numpy as jnp
from flax import struct

from jaxrl_async.envs import make


@struct.dataclass
class PoisonedState:
    inner: Any
    steps: Any  # steps this env has taken


class Poisoned:
    """`env` with reward NaN from its `after`-th step on (0-based, counted per env)."""

    def __init__(self, env, after: int):
        self._env, self._after = env, after

    @property
    def default_params(self):
        return self._env.default_params

    def observation_space(self, params):
        return self._env.observation_space(params)

    def action_space(self, params):
        return self._env.action_space(params)

    def reset(self, key, params=None):
        obs, state = self._env.reset(key, params)
        return obs, PoisonedState(state, jnp.int32(0))

    def step(self, key, state, action, params=None):
        obs, inner, reward, *rest = self._env.step(key, state.inner, action, params)
        reward = jnp.where(state.steps >= self._after, jnp.nan, reward)
        return (obs, PoisonedState(inner, state.steps + 1), reward, *rest)


def cartpole(after: int = 600):
    env, params = make("CartPole-v1")
    return Poisoned(env, after), params
