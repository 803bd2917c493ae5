"""Gymnasium vector envs by name, stepped on the host: `gymnasium:<id>`,
`gymnasium:<module>:<id>` and `gymnasium:<module>:<factory>`.

`make_gymnasium(name, num_envs, **kwargs)` builds `gymnasium.make_vec(id, num_envs,
vectorization_mode, **kwargs)` (`kwargs` are the config's `env.kwargs`, passed to the
env) and wraps it in `GymnasiumVecEnv`, a `HostEnv`. With a module, it is imported first
so that its `gymnasium.register` calls run: a user's own `gymnasium.Env`. Where the module
registers no such id, a callable of that name in it (a function or a `gymnasium.Env`
class) is the env's factory, called with the kwargs once per env. The `gymnasium:` prefix
is what tells a host env apart from a JAX env's `module.path:factory`.

`factory_name(factory)` names a factory passed as `train(env=...)`: `gymnasium:<module>:
<qualname>` where that imports it again, else (a lambda, a local function, one of
`__main__`) `gymnasium:env_factory/<qualname>`, an id registered with Gymnasium in this
process only: another process (`resume`, `eval` without env=) refuses it in one line.

Both of Gymnasium's autoreset modes give the same `HostStep`s:

- same-step (`AutoresetMode.SAME_STEP`): an env whose episode ends resets within the
  step; the last observation arrives in `info["final_obs"]` (where `info["_final_obs"]`)
  and becomes `final_obs`;
- next-step (`AutoresetMode.NEXT_STEP`, Gymnasium's default and that of vectorised
  envs such as CartPole's): the ending step returns the last observation, and the next
  step only resets that env, ignoring its action: that step is marked not `valid`, with
  reward 0.

The mode is read from the vector env's `metadata["autoreset_mode"]`. Sync and async
vector envs take the mode asked for (same-step unless told otherwise: no step is lost to
a reset); a vector entry point (CartPole's, for one) keeps its own.

An `ALE/` id (`gymnasium:ALE/Breakout-v5`) is Atari through ale-py, preprocessed as DQN
and PPO train on it; its kwargs are in `atari.py`.
"""

from __future__ import annotations

import importlib
import linecache
import os
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import gymnasium
import numpy as np
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

from jaxrl_async.errors import ConfigError, EnvOutputError, EnvSpecError, building_env, first_line
from jaxrl_async.host.atari import (
    AtariLayer,
    AtariOptions,
    channels_last,
    is_atari,
    register_ale,
    take_options,
    vec_arguments,
)
from jaxrl_async.host.episodes import episodes_init, episodes_update
from jaxrl_async.host.host_env import HostStep
from jaxrl_async.host.spaces import (
    HostSpaces,
    flags_mismatch,
    map_spaces,
    mismatch,
    obs_shapes,
    shape_of,
    shapes_fit,
)

PREFIX = "gymnasium"
_VECTORIZATION = ("sync", "async", "vector_entry_point")
_MODES = {"same_step": AutoresetMode.SAME_STEP, "next_step": AutoresetMode.NEXT_STEP}
# The namespace of the ids `factory_name` registers for factories no process can import.
FACTORY_NAMESPACE = "env_factory"
# make_vec's own arguments: an env kwarg of one of these names would be taken by it.
_RESERVED = frozenset({"id", "num_envs", "vectorization_mode", "vector_kwargs", "wrappers"})


def parse_name(name: str) -> tuple[str | None, str]:
    """(module or None, Gymnasium id) of `gymnasium:<id>` or `gymnasium:<module>:<id>`."""
    prefix, _, rest = name.partition(":")
    parts = rest.split(":")
    if prefix != PREFIX or not all(parts) or len(parts) > 2:
        raise ConfigError(
            f"env.name={name!r}: expected {PREFIX}:<id> or {PREFIX}:<module>:<id> "
            f"(gymnasium:CartPole-v1, gymnasium:my_envs:Corridor-v0)"
        )
    return (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])


def _import_module(name: str, module: str) -> None:
    cwd = os.getcwd()
    if cwd not in sys.path:  # `jaxrl-async` (unlike `python -m`) does not put it there
        sys.path.append(cwd)
    try:
        importlib.import_module(module)
    except Exception as e:  # noqa: BLE001  (any error while importing the user's module)
        raise ConfigError(
            f"env.name={name!r}: cannot import {module!r}: {type(e).__name__}: {first_line(e)}"
        ) from None


def _find_id(name: str, module: str | None, env_id: str) -> EnvSpec:
    """The id's Gymnasium EnvSpec (or that of the module's factory of that name), or a
    one-line ConfigError."""
    try:
        return gymnasium.spec(env_id)
    except gymnasium.error.Error as e:
        if module is not None:
            factory = _attribute(sys.modules[module], env_id)
            if callable(factory):
                return EnvSpec(id=_safe_id(env_id), entry_point=checked_factory(name, factory))
        if env_id.startswith(f"{FACTORY_NAMESPACE}/"):
            raise ConfigError(
                f"env.name={name!r}: a factory passed as env= that no other process can "
                "import (a lambda, a local function, one of __main__): pass it again as "
                "env=, or define it at a module's top level"
            ) from None
        hint = "" if module else f" (name the module that registers it: {PREFIX}:<module>:<id>)"
        raise ConfigError(f"env.name={name!r}: {first_line(e)}{hint}") from None


def _attribute(owner: Any, dotted: str) -> Any:
    """owner.a.b of `dotted` "a.b", or None."""
    for part in dotted.split("."):
        owner = getattr(owner, part, None)
    return owner


def _safe_id(text: str) -> str:
    """`text` as a Gymnasium id's name: word characters, dots and dashes."""
    return re.sub(r"[^\w.-]", "", text) or "factory"


def checked_factory(name: str, factory: Callable[..., Any]) -> Callable[..., Any]:
    """`factory` as an entry point: a `gymnasium.Env` class as it is, any other callable
    checked to return a `gymnasium.Env` (else a one-line ConfigError)."""
    if isinstance(factory, type) and issubclass(factory, gymnasium.Env):
        return factory

    def build(**kwargs: Any) -> gymnasium.Env:
        env = factory(**kwargs)
        if not isinstance(env, gymnasium.Env):
            raise ConfigError(
                f"env {name}: its factory returned {type(env).__name__}, not a gymnasium.Env"
            )
        return env

    return build


def factory_name(factory: Callable[..., Any]) -> str:
    """The env.name of a Gymnasium env's factory passed as `train(env=...)`:
    `gymnasium:<module>:<qualname>` where that imports the same callable again, else
    `gymnasium:env_factory/<qualname>`, registered with Gymnasium in this process."""
    module = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", None) or type(factory).__name__
    if (
        module not in (None, "__main__")
        and "<" not in qualname
        and module in sys.modules
        and _attribute(sys.modules[module], qualname) is factory
    ):
        return f"{PREFIX}:{module}:{qualname}"
    env_id = f"{FACTORY_NAMESPACE}/{_safe_id(qualname)}"
    name = f"{PREFIX}:{env_id}"
    gymnasium.registry.pop(env_id, None)  # the latest factory of that name (a notebook's)
    gymnasium.register(id=env_id, entry_point=checked_factory(name, factory))
    return name


def autoreset_mode_of(value: AutoresetMode | str) -> AutoresetMode:
    """An AutoresetMode from itself, its value ("SameStep") or its name ("same_step")."""
    if isinstance(value, AutoresetMode):
        mode = value
    else:
        mode = _MODES.get(str(value).lower()) or next(
            (m for m in AutoresetMode if m.value == value), AutoresetMode.DISABLED
        )
    if mode not in _MODES.values():
        raise ConfigError(f"autoreset_mode must be one of {sorted(_MODES)}, got {value!r}")
    return mode


def make_gymnasium(
    name: str,
    num_envs: int,
    *,
    vectorization_mode: str | None = None,
    autoreset_mode: AutoresetMode | str | None = None,
    **kwargs: Any,
) -> GymnasiumVecEnv:
    """`num_envs` copies of the env `name` (`gymnasium:[<module>:]<id>`) with `kwargs`.

    vectorization_mode: make_vec's ("sync", "async", "vector_entry_point"); None takes the
        id's vector entry point where it has one (but for an `ALE/` id), else sync.
    autoreset_mode: for sync and async (same-step when None); a vector entry point must
        already reset that way.

    Unknown ids, modules that do not import, rejected kwargs and spaces that cannot be
    mapped are one-line ConfigErrors (EnvSpecError for a space).
    """
    if num_envs < 1:
        raise ConfigError(f"num_envs must be >= 1, got {num_envs}")
    if vectorization_mode not in (None, *_VECTORIZATION):
        raise ConfigError(
            f"vectorization_mode must be one of {list(_VECTORIZATION)}, got {vectorization_mode!r}"
        )
    module, env_id = parse_name(name)
    if module is not None:
        _import_module(name, module)
    if is_atari(env_id):
        register_ale(name)
    gym_spec = _find_id(name, module, env_id)
    reserved = sorted(_RESERVED & set(kwargs))
    if reserved:
        raise ConfigError(f"env.kwargs {reserved} of {name} are make_vec's own arguments")
    wanted = None if autoreset_mode is None else autoreset_mode_of(autoreset_mode)
    options = take_options(name, kwargs) if is_atari(env_id) else None
    # ALE's vector entry point is opt-in: its preprocessing is its own.
    own_vector = gym_spec.vector_entry_point and not is_atari(env_id)
    chosen = vectorization_mode or ("vector_entry_point" if own_vector else "sync")
    if options is not None:
        arguments = vec_arguments(name, options, chosen, wanted, kwargs)
    else:
        vector_kwargs = {}
        if chosen != "vector_entry_point":
            vector_kwargs["autoreset_mode"] = wanted or AutoresetMode.SAME_STEP
        arguments = {"vectorization_mode": chosen, "vector_kwargs": vector_kwargs, **kwargs}
    with building_env(repr(name), kwargs):
        # a registered id by itself, a module's factory by its spec
        target = env_id if env_id in gymnasium.registry else gym_spec
        env = gymnasium.make_vec(target, num_envs, **arguments)
    return adapt(name, env, wanted, options)


def adapt(
    name: str, env: VectorEnv, wanted: AutoresetMode | None, options: AtariOptions | None
) -> GymnasiumVecEnv:
    """The adapter over a built vector env (a Gymnasium one, or EnvPool's shim), its mode
    checked against `wanted`; the env is closed again where its spaces or mode fail."""
    try:
        mode = _mode_of(name, env, wanted)
        obs_space = env.single_observation_space
        if options is not None:
            obs_space = channels_last(name, obs_space)
        host_spaces = map_spaces(name, obs_space, env.single_action_space)
    except Exception:
        env.close()
        raise
    layer = None if options is None else AtariLayer(env.num_envs, options)
    return GymnasiumVecEnv(name, env, host_spaces, mode, layer)


def _mode_of(name: str, env: VectorEnv, wanted: AutoresetMode | None) -> AutoresetMode:
    found = env.metadata.get("autoreset_mode")
    try:
        mode = autoreset_mode_of(found) if found is not None else None
    except ConfigError:
        mode = None
    if mode is None:
        raise EnvSpecError(
            f"env {name}: its vector env's autoreset mode is {found!r}; "
            f"supported: {AutoresetMode.NEXT_STEP.value}, {AutoresetMode.SAME_STEP.value}"
        )
    if wanted is not None and mode != wanted:
        raise ConfigError(
            f"env {name}: its vector env resets in mode {mode.value}, not {wanted.value} "
            f"(a vector entry point keeps its own; vectorization_mode=sync takes either)"
        )
    return mode


def _env_entry(batch, i: int):
    """Env i's observation of a batch (an array, a dict of arrays or an object array)."""
    return {k: v[i] for k, v in batch.items()} if isinstance(batch, dict) else batch[i]


def _with_final(raw_obs, info: dict, done: np.ndarray, check: Callable[[Any], None]) -> Any:
    """The observation batch before any reset: `raw_obs` with `info["final_obs"]` put in
    where `info["_final_obs"]` (same-step autoreset), or where `done` when the env gives
    the batch without that mask (ale-py's AtariVectorEnv); `check` sees each entry first."""
    mask = info.get("_final_obs", done if "final_obs" in info else None)
    if mask is None or not np.any(mask):
        return raw_obs
    finals = info["final_obs"]
    if isinstance(raw_obs, dict):
        out = {k: np.array(v) for k, v in raw_obs.items()}
        for i in np.flatnonzero(mask):
            entry = _env_entry(finals, int(i))
            check(entry)
            for k in out:
                out[k][i] = entry[k]
        return out
    array = np.array(raw_obs)
    for i in np.flatnonzero(mask):
        entry = _env_entry(finals, int(i))
        check(entry)
        array[i] = entry
    return array


# The fields of a sync vector env's step, by the buffer its loop stores each env's into.
_SYNC_FIELDS = {
    "_rewards": "a reward that is not one number",
    "_terminations": "terminated that is not one bool",
    "_truncations": "truncated that is not one bool",
}


def _sync_field(error: BaseException) -> str | None:
    """Where `error` was raised by SyncVectorEnv.step itself storing one env's output in
    its buffers (a reward that is not one number, say): that field, else None. Read from
    the line that raised, on the failure path only."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or tb.tb_frame.f_code is not SyncVectorEnv.step.__code__:
        return None
    line = linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno)
    found = [what for buffer, what in _SYNC_FIELDS.items() if buffer in line]
    return found[0] if found else "a reward, terminated or truncated that is not one number"


def mask_entries(obs: np.ndarray, indices: tuple[int, ...]) -> np.ndarray:
    """`obs` with the entries `indices` of its last axis zeroed (a copy): what the JAX
    envs' `MaskObservation` does (env.mask_obs)."""
    masked = np.array(obs)
    masked[..., list(indices)] = 0
    return masked


class GymnasiumVecEnv:
    """A Gymnasium vector env as a `HostEnv`: observations and actions as `spec` says,
    every step a `HostStep` with exact episode semantics in either autoreset mode.
    `mask` (env.mask_obs, set by `by_name.make_run_env`): the entries of the last axis
    of every observation, final ones included, zeroed (the spec is unchanged)."""

    mask: tuple[int, ...] = ()

    def __init__(
        self,
        name: str,
        env: VectorEnv,
        spaces: HostSpaces,
        mode: AutoresetMode,
        atari: AtariLayer | None = None,
    ):
        self.name, self.env, self.autoreset_mode = name, env, mode
        self.atari = atari
        self.num_envs: int = env.num_envs
        self.spec = spaces.spec
        self._spaces = spaces
        # What the vector env declares of one env's observation, against which each
        # step's batch (its shapes) and final observations are checked.
        self._obs_space = env.single_observation_space
        self._batch_shapes = obs_shapes(self._obs_space, self.num_envs)
        self._entry_shapes = obs_shapes(self._obs_space)
        self._one_each = (self.num_envs,)
        self._totals = episodes_init(self.num_envs)
        # next-step autoreset: the envs whose next step only resets them.
        self._resetting = np.zeros(self.num_envs, bool)
        self._all_valid = np.ones(self.num_envs, bool)
        self._all_valid.flags.writeable = False

    def reset(self, seed: int) -> Any:
        """Reset every env, env i from `seed` + i (Gymnasium's rule for sync and async;
        a vector entry point seeds itself from `seed`): the same seed, the same episodes."""
        try:
            raw_obs, info = self.env.reset(seed=seed)
        except (ValueError, TypeError) as e:
            self._failed(e)
        self._check(raw_obs)
        self._totals = episodes_init(self.num_envs)
        self._resetting = np.zeros(self.num_envs, bool)
        if self.atari is not None:
            self.atari.reset(info)
        return self._observe(raw_obs)

    def _observe(self, raw_obs) -> Any:
        if self.atari is not None:
            raw_obs = self.atari.observe(raw_obs)
        obs = self._spaces.observe(raw_obs)
        return mask_entries(obs, self.mask) if self.mask else obs

    def step(self, actions: np.ndarray) -> HostStep:
        actions = np.asarray(actions)
        expected = (self.num_envs, *self.spec.action_shape)
        if actions.shape != expected:
            raise ValueError(f"env {self.name}: actions of shape {actions.shape}, need {expected}")
        try:
            raw_obs, reward, terminated, truncated, info = self.env.step(self._spaces.act(actions))
        except (ValueError, TypeError) as e:
            self._failed(e)
        self._check(raw_obs, reward, terminated, truncated)
        next_step = self.autoreset_mode == AutoresetMode.NEXT_STEP
        terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
        valid = self._all_valid  # same-step autoreset: every step a transition
        if next_step:  # a reset step is no transition
            valid = ~self._resetting
            terminated, truncated = terminated & valid, truncated & valid
        done = terminated | truncated
        raw_final = raw_obs if next_step else _with_final(raw_obs, info, done, self._check_final)
        self._resetting = done
        # The env's own reward, summed in float64: a raw score, before any cast or clip.
        raw_reward = np.array(reward, np.float64)
        if next_step:
            raw_reward = np.where(valid, raw_reward, 0.0)
        self._totals, ended_return, ended_length = episodes_update(
            self._totals, raw_reward, done, valid
        )
        reward = raw_reward
        if self.atari is not None:  # clipped rewards, a life lost as a termination
            reward, terminated = self.atari.step(raw_reward, terminated, done, valid, info)
        obs = self._observe(raw_obs)
        final_obs = obs if raw_final is raw_obs else self._observe(raw_final)
        return HostStep(
            obs=obs,
            reward=reward.astype(np.float32),
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            valid=valid,
            episode_return=ended_return,
            episode_length=ended_length,
            episode_done=done,
        )

    def _check(self, raw_obs, reward=None, terminated=None, truncated=None) -> None:
        """An EnvOutputError unless the batch has the shapes the spaces declare (a reset's
        observations alone): a few tuples compared on every step."""
        each = self._one_each
        if shapes_fit(raw_obs, self._batch_shapes) and (
            reward is None
            or shape_of(reward) == shape_of(terminated) == shape_of(truncated) == each
        ):
            return
        found = mismatch(raw_obs, self._obs_space, self.num_envs, "observations")
        if found is None and reward is not None:
            found = flags_mismatch(reward, terminated, truncated, self.num_envs)
        raise EnvOutputError(self.name, found or "returned a batch its spaces do not declare")

    def _check_final(self, entry) -> None:
        """An EnvOutputError unless one env's final observation fits its space."""
        if not shapes_fit(entry, self._entry_shapes):
            found = mismatch(entry, self._obs_space, what="a final observation (info['final_obs'])")
            raise EnvOutputError(
                self.name, found or "returned a final observation of another shape"
            )

    def _failed(self, error: Exception) -> NoReturn:
        """Re-raise what the vector env's reset or step raised, as an EnvOutputError where
        a sync vector env could not batch its envs' outputs: an observation its space does
        not declare (the envs' own, compared one by one), or a field that is not one number."""
        base = self.env.unwrapped
        if isinstance(base, SyncVectorEnv):
            for obs in getattr(base, "_env_obs", ()):
                found = mismatch(obs, self._obs_space)
                if found is not None:
                    raise EnvOutputError(self.name, found) from error
            field = _sync_field(error)
            if field is not None:
                why = f"{type(error).__name__}: {first_line(error)}"
                raise EnvOutputError(self.name, f"returned {field} ({why})") from error
        raise error

    def close(self) -> None:
        self.env.close()

    def __enter__(self) -> GymnasiumVecEnv:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
