"""Craftax envs (`env.name=craftax:<id>`) under the gymnax-1.0 contract.

Craftax speaks the old gymnax API, (obs, state, reward, done, info), with its time limit
folded into `done` (state.timestep reaching params.max_timesteps). The adapter builds
the env without craftax's own auto-reset, whose reset observation would hide the last
one, and resets itself, splitting the step key as craftax does: the observations and
rewards are those of craftax's auto-resetting env for the same keys.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from craftax.craftax_env import make_craftax_env_from_name
from flax import struct
from gymnax.environments import spaces

from jaxrl_async.envs.suites.autoreset import reset_where, strong_types
from jaxrl_async.errors import ConfigError, UserError, first_line

# The names make_craftax_env_from_name builds without auto-reset (craftax keeps no registry).
IDS = [
    "Craftax-Classic-Symbolic-v1",
    "Craftax-Classic-Pixels-v1",
    "Craftax-Symbolic-v1",
    "Craftax-Pixels-v1",
]

_NEVER = jnp.iinfo(jnp.int32).max  # a time limit no episode reaches


class CraftaxParams(struct.PyTreeNode):
    suite: Any  # craftax's EnvParams

    @property
    def max_steps_in_episode(self) -> int:  # the time limit, for evaluation to read
        return self.suite.max_timesteps


class CraftaxEnv:
    def __init__(self, env, params):
        self.env = env  # a craftax env without auto-reset
        self.default_params = CraftaxParams(params)
        # Declared as emitted (flat float32 vectors; float32 images in [0, 1] for Pixels).
        self._obs = jax.eval_shape(env.reset, jax.random.key(0), params)[0]

    def observation_space(self, params=None):
        space = self.env.observation_space(self.default_params.suite)
        return spaces.Box(space.low, space.high, self._obs.shape, self._obs.dtype)

    def action_space(self, params=None):
        return spaces.Discrete(self.env.action_space(self.default_params.suite).n)

    def reset(self, key, params=None):
        params = self.default_params if params is None else params
        obs, state = self.env.reset(key, params.suite)
        # Craftax's world generator leaves a weakly typed leaf or two (player_direction)
        # that a step makes strong; a state keeps its types from step to step (else a
        # jitted step compiles twice).
        return obs, strong_types(state)

    def step(self, key, state, action, params=None):
        params = self.default_params if params is None else params
        step_key, reset_key = jax.random.split(key)  # as craftax's own auto-reset splits it
        obs, stepped, reward, done, info = self.env.step(step_key, state, action, params.suite)
        # Terminated: done by craftax's own rule with the time limit lifted (death, lava,
        # the boss beaten), so a death on the last step is terminated, not truncated.
        terminated = self.env.is_terminal(stepped, params.suite.replace(max_timesteps=_NEVER))
        truncated = jnp.logical_and(done, ~terminated)
        # A new world only where an episode ended (`reset_where`): generating one costs
        # about 40 steps, which a select would pay for every env on every step.
        next_obs, next_state = reset_where(
            self.reset, done, reset_key, (obs, stepped), params, fraction=1 / 64
        )
        info = {**info, "final_observation": obs}
        return (next_obs, next_state, jnp.asarray(reward, jnp.float32), terminated, truncated, info)


def ids() -> list[str]:
    return list(IDS)


def direct(env_id: str, **kwargs):
    """(reset, step) of Craftax's own API for one env, for `bench` to weigh the adapter
    against: "direct" is Craftax's auto-resetting env's `reset(key, params)` and
    `step(key, state, action, params)` (its reset drawn every step, selected where done)."""
    params = make(env_id, **kwargs)[1].suite  # the kwargs checked as the adapter checks them
    env = make_craftax_env_from_name(env_id, auto_reset=True)

    def reset(key):
        return env.reset(key, params)[1]

    def step(key, state, action):
        return env.step(key, state, action, params)[1]

    return reset, step


def make(env_id: str, **kwargs):
    """(env, params) for craftax's `env_id`; kwargs replace fields of craftax's EnvParams
    (e.g. max_timesteps, day_length)."""
    try:
        env = make_craftax_env_from_name(env_id, auto_reset=False)
    except Exception as e:  # noqa: BLE001  (textures, world generation: anything may fail)
        raise UserError(
            f"cannot build env 'craftax:{env_id}': {type(e).__name__}: {first_line(e)}"
        ) from None
    try:
        params = env.default_params.replace(**kwargs)
    except TypeError as e:
        raise ConfigError(
            f"env.kwargs {dict(kwargs)!r} rejected by craftax:{env_id}: {first_line(e)}"
        ) from None
    adapted = CraftaxEnv(env, params)
    return adapted, adapted.default_params
