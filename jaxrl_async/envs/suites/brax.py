"""brax envs (`env.name=brax:<name>`) under the gymnax-1.0 contract.

brax's own training wrappers are not used: AutoResetWrapper puts back the state stored
at the first reset, so every episode would start the same, and EpisodeWrapper reads
shapes that typed keys do not have. The adapter counts the steps of an episode itself
and resets with the step's key where one ends (a brax step draws no randomness).
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import spaces

from jaxrl_async.envs.suites.autoreset import reset_where
from jaxrl_async.errors import ConfigError, UserError, first_line

# mujoco prints "Failed to import warp" to stdout when its optional GPU backend is absent:
# noise in `jaxrl-async envs` and in every run's output.
with contextlib.redirect_stdout(io.StringIO()):
    from brax import envs as brax_envs


class BraxParams(struct.PyTreeNode):
    max_steps_in_episode: int = 1000  # the time limit (a leaf: evaluation reads it too)


class BraxState(struct.PyTreeNode):
    env_state: Any  # brax.envs.State
    t: jax.Array  # steps taken in this episode


class BraxEnv:
    def __init__(self, env, episode_length: int):
        self.env = env
        self.default_params = BraxParams(episode_length)
        # The shape from a trace: brax's observation_size runs a whole reset eagerly.
        self._obs_shape = jax.eval_shape(env.reset, jax.random.key(0)).obs.shape

    def observation_space(self, params=None):
        return spaces.Box(-jnp.inf, jnp.inf, self._obs_shape, jnp.float32)

    def action_space(self, params=None):
        # brax envs take [-1, 1] and scale it to the actuators' ranges themselves.
        return spaces.Box(-1.0, 1.0, (self.env.action_size,), jnp.float32)

    def reset(self, key, params=None):
        state = self.env.reset(key)
        return state.obs.astype(jnp.float32), BraxState(state, jnp.int32(0))

    def step(self, key, state, action, params=None):
        params = self.default_params if params is None else params
        stepped = self.env.step(state.env_state, action)
        t = state.t + 1
        # brax's `done` is a float and never a time limit (brax's EpisodeWrapper adds that).
        # A step that is both done and at the limit is terminated: it reached a state
        # with no future, whatever the clock says (brax's own truncation flag agrees).
        terminated = stepped.done > 0
        truncated = jnp.logical_and(t >= params.max_steps_in_episode, ~terminated)
        done = jnp.logical_or(terminated, truncated)
        final_obs = stepped.obs.astype(jnp.float32)
        # Resets only where an episode ended (`reset_where`): brax's pipeline init costs
        # a sizeable share of a step. Chunks of 1/8 of the envs: on a CPU a small batch of brax's
        # many small ops costs nearly what a big one does.
        obs, next_state = reset_where(
            self.reset, done, key, (final_obs, BraxState(stepped, t)), fraction=1 / 8
        )
        reward = jnp.asarray(stepped.reward, jnp.float32)  # some envs return a Python float
        info = {**stepped.metrics, "final_observation": final_obs}
        return obs, next_state, reward, terminated, truncated, info


def ids() -> list[str]:
    return sorted(brax_envs._envs)  # brax's registry (get_environment reads it)


def direct(env_id: str, episode_length: int = 1000, **kwargs):
    """(reset, step) of brax's own API for one env, for `bench` to weigh the adapter against:
    "direct" is brax's `env.reset(key)` and plain `env.step(state, action)`, no time limit
    and no reset (brax resets only through its training wrappers, which are not used)."""
    del episode_length  # the adapter's time limit; brax's own step has none
    env = brax_envs.get_environment(env_id, **kwargs)
    return env.reset, lambda key, state, action: env.step(state, action)


def make(env_id: str, episode_length: int = 1000, **kwargs):
    """(env, params) for brax's `env_id`; `episode_length` is the time limit, the other
    kwargs go to the env's constructor (e.g. backend="positional")."""
    if (
        isinstance(episode_length, bool)
        or not isinstance(episode_length, int)
        or episode_length < 1
    ):
        raise ConfigError(f"env.kwargs.episode_length must be an int >= 1, got {episode_length!r}")
    try:
        env = brax_envs.get_environment(env_id, **kwargs)
    except TypeError as e:
        raise ConfigError(
            f"env.kwargs {dict(kwargs)!r} rejected by brax:{env_id}: {first_line(e)}"
        ) from None
    except Exception as e:  # noqa: BLE001  (a model file, a backend: anything may fail)
        raise UserError(
            f"cannot build env 'brax:{env_id}': {type(e).__name__}: {first_line(e)}"
        ) from None
    adapted = BraxEnv(env, episode_length)
    return adapted, adapted.default_params
