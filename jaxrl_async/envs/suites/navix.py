"""navix envs (`env.name=navix:<id>`) under the gymnax-1.0 contract.

navix resets dm_env-style: the step that ends an episode returns its last timestep
(step_type 1 truncation, 2 termination) and the NEXT step ignores its action and
returns a reset drawn from a key carried in the state. Here the step that ends an
episode also starts the next one, from the step's key, so that an agent never spends a
step on a reset.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import navix
import numpy as np
from flax import struct
from gymnax.environments import spaces

from jaxrl_async.errors import ConfigError, UserError, first_line

# Kwargs navix takes as functions, given by name in a config: the navix module to look in.
_FUNCTION_KWARGS = {
    "observation_fn": "observations",
    "reward_fn": "rewards",
    "termination_fn": "terminations",
}


class NavixParams(struct.PyTreeNode):
    # navix's own time limit (the `max_steps` kwarg), for evaluation to read; not a leaf,
    # because navix fixes it when the env is built.
    max_steps_in_episode: int = struct.field(pytree_node=False, default=100)


class NavixEnv:
    def __init__(self, env):
        self.env = env  # a navix Environment
        self.default_params = NavixParams(env.max_steps)
        self._obs = jax.eval_shape(env.reset, jax.random.key(0)).observation

    def observation_space(self, params=None):
        # Declared from what navix emits: its own spaces cap the symbolic tags at 8
        # while the player's is 10.
        dtype = np.dtype(self._obs.dtype)
        low, high = (
            (np.iinfo(dtype).min, np.iinfo(dtype).max)
            if np.issubdtype(dtype, np.integer)
            else (-np.inf, np.inf)
        )
        return spaces.Box(low, high, self._obs.shape, dtype)

    def action_space(self, params=None):
        return spaces.Discrete(int(self.env.action_space.n))

    def reset(self, key, params=None):
        return self._reset(key, None)  # None: navix draws the cache

    def _reset(self, key, cache):
        timestep = self.env.reset(key, cache)
        # navix starts the running return as a weakly typed 0.0; a step makes it float32,
        # and a state should keep its types from step to step.
        info = {**timestep.info, "return": jnp.asarray(timestep.info["return"], jnp.float32)}
        return timestep.observation, timestep.replace(info=info)

    def step(self, key, state, action, params=None):
        # `_step` is navix's transition without its deferred reset (`step` wraps it in a
        # cond on the previous step type, which is always 0 here).
        stepped = self.env._step(state, jnp.asarray(action, jnp.int32))
        # navix marks a step both terminal and at the limit a termination (type 2).
        terminated, truncated = stepped.is_termination(), stepped.is_truncation()
        done = jnp.logical_or(terminated, truncated)
        # The rendering cache (an image of the walls) passes on as in navix's own reset:
        # drawing it costs more than a step, and envs whose walls change draw their own.
        reset_obs, reset_state = self._reset(key, state.state.cache)
        next_state = jax.tree.map(lambda new, old: jnp.where(done, new, old), reset_state, stepped)
        obs = jnp.where(done, reset_obs, stepped.observation)
        info = {"final_observation": stepped.observation}
        reward = jnp.asarray(stepped.reward, jnp.float32)
        return obs, next_state, reward, terminated, truncated, info


def ids() -> list[str]:
    return sorted(navix.registry())


def direct(env_id: str, **kwargs):
    """(reset, step) of navix's own API for one env, for `bench` to weigh the adapter against:
    "direct" is navix's `env.reset(key)` and `env.step(timestep, action)`, with navix's
    deferred reset (from the key in its state; the step's key is unused)."""
    env = make(env_id, **kwargs)[0].env
    return env.reset, lambda key, timestep, action: env.step(timestep, action)


def make(env_id: str, **kwargs):
    """(env, params) for navix's `env_id`; kwargs go to `navix.make` (e.g. max_steps,
    which navix defaults to 100; observation_fn="rgb" names a navix.observations one)."""
    given = dict(kwargs)
    for name, module in _FUNCTION_KWARGS.items():
        if isinstance(kwargs.get(name), str):
            fn = getattr(getattr(navix, module), kwargs[name], None)
            if not callable(fn):
                raise ConfigError(
                    f"env.kwargs.{name}={kwargs[name]!r}: navix.{module} has no such function"
                )
            kwargs = {**kwargs, name: fn}
    try:
        env = navix.make(env_id, **kwargs)
    except TypeError as e:
        raise ConfigError(
            f"env.kwargs {given!r} rejected by navix:{env_id}: {first_line(e)}"
        ) from None
    except Exception as e:  # noqa: BLE001  (a suite's constructor may raise anything)
        raise UserError(
            f"cannot build env 'navix:{env_id}': {type(e).__name__}: {first_line(e)}"
        ) from None
    adapted = NavixEnv(env)
    return adapted, adapted.default_params
