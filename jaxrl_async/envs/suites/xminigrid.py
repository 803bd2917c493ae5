"""xminigrid 0.9 envs (`xminigrid:<id>`) under the internal gymnax-1.0 contract.

xminigrid's `reset(params, key) -> TimeStep` / `step(params, timestep, action) -> TimeStep`
carry the whole TimeStep as the env state and never reset by themselves; here the TimeStep
is our state and an ended episode restarts from the step's key. Quirks handled here:

- Episode ends: xminigrid marks LAST both when the goal is reached (discount 0) and when
  `step_num == params.max_steps` (discount 1; the goal wins a tie), so discount 0 is
  `terminated` and any other LAST `truncated`.
- kwargs replace fields of the id's EnvParams (`max_steps`, `view_size`, `height`, ...):
  all of them static, so another value compiles another program.
- Observations: the symbolic (view_size, view_size, 2) uint8 grid of (tile, color) ids.
- XLand ids come with an empty rule set (no goal: no reward, no termination ever); they
  need `benchmark=<name>` (xminigrid's rule-set benchmarks, downloaded from the Hugging
  Face Hub into ~/.xland_minigrid on first use) and `ruleset=<index>` (default 0), one
  fixed task per run.
- Keys: typed keys go to xminigrid as they are (it only splits them).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxrl_async.envs.suites import check_resets
from jaxrl_async.envs.suites.autoreset import reset_where, strong_types
from jaxrl_async.errors import ConfigError, UserError, building_env, first_line


def ids() -> list[str]:
    import xminigrid

    return list(xminigrid.registered_environments())


def make(env_id: str, benchmark: str | None = None, ruleset: int | None = None, **kwargs):
    """(XMiniGridEnv, params) for `env_id`; `benchmark`/`ruleset` for XLand ids only."""
    import xminigrid

    xland = env_id.startswith("XLand-")
    if not xland and (benchmark is not None or ruleset is not None):
        raise ConfigError(f"env.kwargs benchmark/ruleset are for XLand ids, not xminigrid:{env_id}")
    if xland and benchmark is None:
        raise ConfigError(
            f"xminigrid:{env_id} needs a rule set: env.kwargs.benchmark=<one of "
            f"{', '.join(xminigrid.registered_benchmarks())}> (downloaded on "
            f"first use) and optionally env.kwargs.ruleset=<index>"
        )
    with building_env(f"xminigrid:{env_id}", kwargs):
        env, params = xminigrid.make(env_id, **kwargs)
    if benchmark is not None:  # an XLand id (checked above)
        params = params.replace(ruleset=_ruleset(benchmark, 0 if ruleset is None else ruleset))
    wrapped = XMiniGridEnv(env, params)
    check_resets(f"xminigrid:{env_id}", wrapped, params)
    return wrapped, params


def direct(env_id: str, **kwargs):
    """(reset, step) of xminigrid's own API for one env, for `bench --env`'s adapter overhead.

    "Direct" is xminigrid's `reset(params, key)` and `step(params, timestep, action)` alone
    (the TimeStep, observation included, is the state): no auto-reset.
    """
    env, params = make(env_id, **kwargs)

    def reset(key):
        return env._env.reset(params, key)

    def step(key, timestep, action):
        return env._env.step(params, timestep, action)

    return reset, step


def _ruleset(benchmark: str, index: int):
    """Rule set `index` of an XLand benchmark (which xminigrid downloads if not cached)."""
    import xminigrid
    from xminigrid import benchmarks

    if benchmark not in xminigrid.registered_benchmarks():
        raise ConfigError(
            f"unknown xminigrid benchmark {benchmark!r} (one of "
            f"{', '.join(xminigrid.registered_benchmarks())})"
        )
    try:
        rulesets = xminigrid.load_benchmark(benchmark)
    except Exception as e:  # noqa: BLE001  (offline: URLError; a partial file: anything)
        raise UserError(
            f"cannot load xminigrid benchmark {benchmark!r} (downloaded from the "
            f"Hugging Face Hub into {benchmarks.DATA_PATH} on first use: offline?): "
            f"{type(e).__name__}: {first_line(e)}"
        ) from None
    count = rulesets.num_rulesets()
    if not 0 <= index < count:
        raise ConfigError(
            f"env.kwargs.ruleset={index!r}: benchmark {benchmark!r} has rule sets 0..{count - 1}"
        )
    return rulesets.get_ruleset(index)


class XMiniGridEnv:
    """An xminigrid env with the gymnax-1.0 API; its state is xminigrid's TimeStep."""

    def __init__(self, env, params):
        self._env, self.default_params = env, params

    def observation_space(self, params=None):
        from gymnax.environments import spaces
        from xminigrid.core.constants import NUM_COLORS, NUM_TILES

        params = self.default_params if params is None else params
        shape = tuple(self._env.observation_shape(params))
        # Layer 0 holds tile ids, layer 1 color ids.
        high = np.broadcast_to(np.array([NUM_TILES - 1, NUM_COLORS - 1], np.uint8), shape)
        return spaces.Box(np.zeros(shape, np.uint8), high, shape, jnp.uint8)

    def action_space(self, params=None):
        from gymnax.environments import spaces

        params = self.default_params if params is None else params
        return spaces.Discrete(self._env.num_actions(params))

    def reset(self, key, params=None):
        params = self.default_params if params is None else params
        timestep = self._restart(key, params)
        return timestep.observation, timestep

    def _restart(self, key, params):
        # xminigrid's reset leaves a weakly typed leaf that its step makes strong.
        return strong_types(self._env.reset(params, key))

    def step(self, key, state, action, params=None):
        params = self.default_params if params is None else params
        timestep = self._env.step(params, state, action)
        done = timestep.last()
        # The restart (observation included) is computed only for the envs that ended.
        state = reset_where(self._restart, done, key, timestep, params)
        terminated = done & (timestep.discount == 0)
        truncated = done & (timestep.discount != 0)
        return (
            state.observation,
            state,
            jnp.asarray(timestep.reward, jnp.float32),
            terminated,
            truncated,
            {"final_observation": timestep.observation},
        )
