"""jumanji 1.1 envs (`jumanji:<id>`) under the internal gymnax-1.0 contract.

jumanji's `reset(key) -> (state, TimeStep)` / `step(state, action) -> (state, TimeStep)`
become `reset(key, params)` / `step(key, state, action, params)` with auto-reset from the
step's key. Quirks handled here:

- Episode ends: a LAST TimeStep with discount 0 is `terminated`, with discount > 0
  `truncated`. jumanji 1.1 itself ends most single-agent episodes at their `time_limit`
  with discount 0 (Snake, Maze, PacMan, Tetris, RubiksCube, ...; those with a limit
  mostly show `step_count` in the observation), so those report `terminated`: the
  suite's own semantics, passed on unchanged.
- Observations (NamedTuples or dataclasses, some nested) become a flat dict
  {field: array}, nested fields named "outer.inner", each declared as a Box of the spec's
  dtype; "action_mask", where the env has one, is a bool vector over our actions.
- Action spaces: a `DiscreteArray` is a `Discrete`. A `MultiDiscreteArray` becomes one
  `Discrete` over the joint choices (row-major), with the joint mask: jumanji's own where
  its mask already covers every joint choice (BinPack, FlatPack, Minesweeper, Sudoku,
  Tetris), the outer product of per-agent masks for the multi-agent envs (Cleaner,
  RobotWarehouse, MMST); RubiksCube has none. Flattening covers 11 ids (refusing would
  leave 10 usable).
- Keys: typed keys go to jumanji as they are (it only splits them), so every
  `train.prng` implementation works; raw key data would be read as threefry keys.

Supported ids (default kwargs): CVRP-v1, Game2048-v1, GraphColoring-v1, Knapsack-v1,
Maze-v0, PacMan-v1, SlidingTilePuzzle-v0, Snake-v1, TSP-v1, Sokoban-v0 (its levels are
downloaded from the Hugging Face Hub when it is built) and, flattened, BinPack-v2,
FlatPack-v0, Minesweeper-v0, Sudoku-v0, Sudoku-very-easy-v0, Tetris-v0, RubiksCube-v0,
RubiksCube-partly-scrambled-v0, Cleaner-v0, RobotWarehouse-v0, MMST-v0.
Refused (ConfigError at make): Connector-v3, LevelBasedForaging-v0, SearchAndRescue-v0
(a reward per agent), JobShop-v0 (21**10 joint actions), MultiCVRP-v0 (an integer
action array that is not a discrete spec).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from jaxrl_async.envs.suites import check_resets
from jaxrl_async.envs.suites.autoreset import reset_where
from jaxrl_async.errors import ConfigError, building_env

# Above this many joint actions a flattened MultiDiscrete space is refused: a policy head
# of that many logits (and a mask as long, every step) stops being practical.
MAX_JOINT_ACTIONS = 2**16

# Envs whose (agents, actions) mask allows each agent's action on its own; every other
# MultiDiscrete env's mask has one entry per joint action. Told apart by name because the
# shapes alone can coincide (Minesweeper with 2 rows has a (2, cols) joint mask).
PER_AGENT_MASK = frozenset(
    {"Cleaner", "Connector", "JobShop", "LevelBasedForaging", "MMST", "RobotWarehouse"}
)


def ids() -> list[str]:
    import jumanji

    return sorted(jumanji.registered_environments())


def make(env_id: str, **kwargs):
    """(JumanjiEnv, None) for `env_id`; one-line ConfigError / UserError when it cannot be."""
    import jumanji

    with building_env(f"jumanji:{env_id}", kwargs):  # Sokoban downloads its levels
        env = jumanji.make(env_id, **kwargs)
    wrapped = JumanjiEnv(env, env_id)
    check_resets(f"jumanji:{env_id}", wrapped, None)
    return wrapped, None


def direct(env_id: str, **kwargs):
    """(reset, step) of jumanji's own API for one env, for `bench --env`'s adapter overhead.

    "Direct" is jumanji's `reset(key)` and the step of its own `AutoResetWrapper` (the
    final observation kept in extras, as the adapter keeps it): what a loop stepping
    jumanji itself would run. Our joint action is split into jumanji's MultiDiscrete one.
    """
    from jumanji.wrappers import AutoResetWrapper

    env, _ = make(env_id, **kwargs)
    auto = AutoResetWrapper(env._env, next_obs_in_extras=True)

    def reset(key):
        return auto.reset(key)[0]

    def step(key, state, action):
        return auto.step(state, env._suite_action(action))[0]

    return reset, step


class JumanjiEnv:
    """A jumanji env with the gymnax-1.0 API (params unused: jumanji has none)."""

    default_params = None

    def __init__(self, env, env_id: str):
        from jumanji import specs

        self._env, self.env_id = env, env_id
        name = type(env.unwrapped).__name__
        for what, spec in (("reward", env.reward_spec), ("discount", env.discount_spec)):
            if tuple(spec.shape) != ():
                raise ConfigError(
                    f"jumanji:{env_id} is not supported: its {what} has shape "
                    f"{tuple(spec.shape)} (one per agent), not a scalar"
                )
        action = env.action_spec
        if isinstance(action, specs.DiscreteArray):
            self._nvec = None
            self.num_actions = int(action.num_values)
        elif isinstance(action, specs.MultiDiscreteArray) and action.num_values.ndim == 1:
            self._nvec = tuple(int(n) for n in action.num_values)
            self.num_actions = math.prod(self._nvec)
            if self.num_actions > MAX_JOINT_ACTIONS:
                raise ConfigError(
                    f"jumanji:{env_id} is not supported: its MultiDiscrete action "
                    f"space {list(self._nvec)} has {self.num_actions:,} joint "
                    f"actions (at most {MAX_JOINT_ACTIONS:,})"
                )
        else:
            raise ConfigError(
                f"jumanji:{env_id} is not supported: its action spec is a "
                f"{type(action).__name__} {tuple(action.shape)} of "
                f"{np.dtype(action.dtype).name} (only Discrete or MultiDiscrete)"
            )
        self._action_dtype = action.dtype
        self._fields = dict(_leaf_specs(env.observation_spec))
        self._per_agent_mask = name in PER_AGENT_MASK
        mask = self._fields.get("action_mask")
        if mask is not None:
            expected = (
                (self.num_actions,)
                if self._nvec is None
                else ((len(self._nvec), max(self._nvec)) if self._per_agent_mask else self._nvec)
            )
            if tuple(mask.shape) != tuple(expected):
                raise ConfigError(
                    f"jumanji:{env_id} is not supported: an action mask of "
                    f"shape {tuple(mask.shape)}, expected {tuple(expected)}"
                )

    def observation_space(self, params=None):
        from gymnax.environments import spaces

        boxes = {name: _box(spec) for name, spec in self._fields.items()}
        if "action_mask" in boxes:
            boxes["action_mask"] = spaces.Box(False, True, (self.num_actions,), jnp.bool_)
        return spaces.Dict(boxes)

    def action_space(self, params=None):
        from gymnax.environments import spaces

        return spaces.Discrete(self.num_actions)

    def reset(self, key, params=None):
        state, timestep = self._env.reset(key)
        return self._observe(timestep.observation), state

    def _reset(self, key):
        state, timestep = self._env.reset(key)
        return state, self._observe(timestep.observation)

    def step(self, key, state, action, params=None):
        state, timestep = self._env.step(state, self._suite_action(action))
        done = timestep.last()
        final_obs = self._observe(timestep.observation)
        # The reset (state and observation) is computed only for the envs that ended.
        state, obs = reset_where(self._reset, done, key, (state, final_obs))
        terminated = done & (timestep.discount == 0)
        truncated = done & (timestep.discount != 0)
        return (
            obs,
            state,
            jnp.asarray(timestep.reward, jnp.float32),
            terminated,
            truncated,
            {"final_observation": final_obs},
        )

    def _suite_action(self, action):
        """Our scalar action as jumanji's: a joint index is split row-major."""
        if self._nvec is None:
            return jnp.asarray(action, self._action_dtype)
        return jnp.stack(jnp.unravel_index(action, self._nvec)).astype(self._action_dtype)

    def _observe(self, observation) -> dict:
        out = {}
        for name, spec in self._fields.items():
            value = observation
            for part in name.split("."):
                value = getattr(value, part)
            out[name] = jnp.asarray(value, spec.dtype)
        if "action_mask" in out:
            out["action_mask"] = self._joint_mask(out["action_mask"])
        return out

    def _joint_mask(self, mask):
        if not self._per_agent_mask or self._nvec is None:  # one mask over the actions
            return mask.reshape(-1)
        # Joint action (a0, a1, ...) is legal where each agent's own action is.
        joint = mask[0, : self._nvec[0]]
        for agent, n in enumerate(self._nvec[1:], start=1):
            joint = joint[..., None] & mask[agent, :n]
        return joint.reshape(-1)


def _leaf_specs(spec, prefix: str = ""):
    """(dotted name, array spec) for every array in a (nested) jumanji observation spec."""
    from jumanji import specs

    if isinstance(spec, specs.Array):
        yield prefix, spec
        return
    # Child specs are attributes of a nested Spec (how jumanji's own gym conversion reads them).
    for name, child in vars(spec).items():
        if isinstance(child, specs.Spec):
            yield from _leaf_specs(child, f"{prefix}.{name}" if prefix else name)


def _box(spec):
    """A gymnax Box with the spec's shape, dtype and bounds (the dtype's range if unbounded)."""
    from gymnax.environments import spaces
    from jumanji import specs

    dtype = np.dtype(spec.dtype)
    if isinstance(spec, specs.BoundedArray):
        low, high = np.asarray(spec.minimum), np.asarray(spec.maximum)
    elif dtype == np.bool_:
        low, high = np.asarray(False), np.asarray(True)
    elif np.issubdtype(dtype, np.integer):
        low, high = np.asarray(np.iinfo(dtype).min), np.asarray(np.iinfo(dtype).max)
    else:
        low, high = np.asarray(-np.inf), np.asarray(np.inf)
    shape = tuple(spec.shape)
    return spaces.Box(
        np.broadcast_to(low.astype(dtype), shape),
        np.broadcast_to(high.astype(dtype), shape),
        shape,
        dtype,
    )
