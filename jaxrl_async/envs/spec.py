"""What the pipeline needs to know about an env, and the start-up check that it is true."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import PyTreeDef

from jaxrl_async.errors import EnvSpecError


class EnvSpec(NamedTuple):
    # An array observation's shape and dtype; for a dict observation (gymnax spaces.Dict,
    # e.g. a jumanji env with an action mask), dicts of them by key.
    obs_shape: tuple[int, ...] | dict[str, tuple[int, ...]]
    obs_dtype: np.dtype | dict[str, np.dtype]
    discrete: bool
    num_actions: int  # categories for a discrete action space, else 0
    action_shape: tuple[int, ...]
    action_dtype: np.dtype
    action_low: Any = None  # bounds of a continuous action space, else None
    action_high: Any = None


def _space_shape(space, what: str) -> tuple[tuple[int, ...], np.dtype]:
    shape, dtype = getattr(space, "shape", None), getattr(space, "dtype", None)
    if shape is None or dtype is None:
        raise EnvSpecError(f"{what} space {space!r} has no shape/dtype (need a Box or Discrete)")
    return tuple(int(d) for d in shape), np.dtype(dtype)


def _obs_space(space):
    """(shape, dtype) of an observation space; dicts of them for a Dict space."""
    entries = getattr(space, "spaces", None)
    if not isinstance(entries, dict):
        return _space_shape(space, "observation")
    if not entries:
        raise EnvSpecError("observation space is an empty Dict")
    shapes, dtypes = {}, {}
    for key, sub in entries.items():
        if isinstance(getattr(sub, "spaces", None), dict):
            raise EnvSpecError(
                f"observation space entry {key!r} is a nested Dict "
                f"(one level of arrays is supported)"
            )
        shapes[key], dtypes[key] = _space_shape(sub, f"observation[{key!r}]")
    return shapes, dtypes


def obs_like(spec: EnvSpec, batch: tuple[int, ...] = ()):
    """ShapeDtypeStructs of one observation (with leading `batch` axes): an array's, or a
    dict of them."""
    if isinstance(spec.obs_shape, dict):
        return {
            k: jax.ShapeDtypeStruct((*batch, *spec.obs_shape[k]), spec.obs_dtype[k])
            for k in spec.obs_shape
        }
    return jax.ShapeDtypeStruct((*batch, *spec.obs_shape), spec.obs_dtype)


def obs_zeros(spec: EnvSpec, batch: tuple[int, ...] = (1,)):
    """A zero observation batch (what networks are initialised on)."""
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), obs_like(spec, batch))


def spec_of(env, params) -> EnvSpec:
    """Read the declared spaces of a gymnax-API env."""
    for name in ("reset", "step", "observation_space", "action_space"):
        if not callable(getattr(env, name, None)):
            raise EnvSpecError(f"env {type(env).__name__} has no {name}() (gymnax API)")
    obs_shape, obs_dtype = _obs_space(env.observation_space(params))
    action_space = env.action_space(params)
    action_shape, action_dtype = _space_shape(action_space, "action")
    if hasattr(action_space, "n"):
        if action_shape != () or not np.issubdtype(action_dtype, np.integer):
            raise EnvSpecError(f"discrete action space {action_space!r} must be scalar integers")
        return EnvSpec(obs_shape, obs_dtype, True, int(action_space.n), (), action_dtype)
    if not np.issubdtype(action_dtype, np.floating):
        raise EnvSpecError(f"continuous action space {action_space!r} must have a float dtype")
    low = np.broadcast_to(np.asarray(action_space.low, np.float32), action_shape)
    high = np.broadcast_to(np.asarray(action_space.high, np.float32), action_shape)
    return EnvSpec(obs_shape, obs_dtype, False, 0, action_shape, action_dtype, low, high)


def _expect(value, shape, dtype, what: str) -> None:
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        raise EnvSpecError(f"{what} is {type(value).__name__}, expected an array")
    if tuple(value.shape) != tuple(shape) or np.dtype(value.dtype) != np.dtype(dtype):
        raise EnvSpecError(
            f"{what} has shape {tuple(value.shape)} dtype {np.dtype(value.dtype)}, "
            f"declared {tuple(shape)} {np.dtype(dtype)}"
        )


def _expect_obs(obs, spec: EnvSpec, what: str) -> None:
    if not isinstance(spec.obs_shape, dict):
        _expect(obs, spec.obs_shape, spec.obs_dtype, what)
        return
    if not isinstance(obs, dict) or set(obs) != set(spec.obs_shape):
        keys = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
        raise EnvSpecError(f"{what} is {keys}, declared a dict with keys {sorted(spec.obs_shape)}")
    for key in spec.obs_shape:
        _expect(obs[key], spec.obs_shape[key], spec.obs_dtype[key], f"{what}[{key!r}]")


def check_env(env, params) -> EnvSpec:
    """Trace reset and step once (no compute) and compare their outputs with the spaces.

    Raises EnvSpecError with one line naming the first disagreement.
    """
    spec = spec_of(env, params)
    key = jax.random.key(0)
    action = jax.ShapeDtypeStruct(spec.action_shape, spec.action_dtype)
    try:
        reset_out = jax.eval_shape(env.reset, key, params)
    except Exception as e:  # noqa: BLE001  (a user's env may raise anything: one line)
        raise EnvSpecError(
            f"env.reset(key, params) failed: {type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}"
        ) from None
    if not isinstance(reset_out, tuple) or len(reset_out) != 2:
        raise EnvSpecError("env.reset must return (obs, state)")
    obs, state = reset_out
    _expect_obs(obs, spec, "reset observation")
    try:
        step_out = jax.eval_shape(env.step, key, state, action, params)
    except Exception as e:  # noqa: BLE001  (a user's env may raise anything: one line)
        raise EnvSpecError(
            f"env.step(key, state, action, params) failed: {type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}"
        ) from None
    if not isinstance(step_out, tuple) or len(step_out) != 6:
        raise EnvSpecError(
            "env.step must return (obs, state, reward, terminated, truncated, info)"
            " as in the gymnax 1.0 API"
        )
    obs, new_state, reward, terminated, truncated, info = step_out
    _expect_obs(obs, spec, "step observation")
    # Annotated: jaxlib ships no stub for PyTreeDef, which mypy then cannot compare.
    state_def: PyTreeDef = jax.tree.structure(state)
    if state_def != jax.tree.structure(new_state):
        raise EnvSpecError("env.step returns a state whose structure differs from reset's")
    for name, value in (("reward", reward), ("terminated", terminated), ("truncated", truncated)):
        if getattr(value, "shape", None) != ():
            raise EnvSpecError(
                f"step {name} must be a scalar, got shape "
                f"{getattr(value, 'shape', type(value).__name__)}"
            )
    if not (
        jnp.issubdtype(reward.dtype, jnp.floating) or jnp.issubdtype(reward.dtype, jnp.integer)
    ):
        raise EnvSpecError(f"step reward must be numeric, got {reward.dtype}")
    if not isinstance(info, dict) or "final_observation" not in info:
        raise EnvSpecError(
            "step info must be a dict with 'final_observation' (the observation "
            "before auto-reset, gymnax 1.0 API)"
        )
    _expect_obs(info["final_observation"], spec, "step info['final_observation']")
    return spec
