"""Gymnasium spaces onto the env spec the JAX suites use (`envs.spec.EnvSpec`).

`map_spaces(name, observation_space, action_space)` returns `HostSpaces(spec, observe,
act)`: the spec, and the numpy conversions between the env's batches and what the
networks see. An observation is a Box, a Discrete, a MultiBinary or a Dict of them:

- a Box keeps its shape; float64, int64 and uint64 become float32, int32 and uint32, the
  widths a device computes in (JAX without x64);
- a Discrete(n, start) becomes a one-hot float32 vector of n entries, which an MLP reads
  as a category rather than as a magnitude;
- a MultiBinary becomes float32 zeros and ones of its shape.

An action is a Discrete (int32 indices from 0; `act` adds the space's start) or a float
Box (float32; `act` casts to the space's dtype and leaves bounds to the agents, as for the
JAX envs). Any other space (Tuple, Text, Graph, Sequence, MultiDiscrete, a nested Dict,
an integer Box of actions) is refused with one line naming the env and the space.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from jaxrl_async.envs.spec import EnvSpec
from jaxrl_async.errors import EnvSpecError

# Widths a device computes in without x64; others pass unchanged.
_DEVICE_DTYPE: dict[np.dtype, np.dtype] = {
    np.dtype(np.float64): np.dtype(np.float32),
    np.dtype(np.int64): np.dtype(np.int32),
    np.dtype(np.uint64): np.dtype(np.uint32),
}
_MAPPED = "Box, Discrete, MultiBinary or a Dict of them"


class HostSpaces(NamedTuple):
    """A host env's spec and the conversions between its batches and the networks'.

    observe: the env's observation batch [B, ...] (an array or a dict of arrays) -> the
        spec's (converted dtypes, one-hot categories).
    act: an action batch [B, ...] of the spec's dtype -> the env's (dtype, start).
    """

    spec: EnvSpec
    observe: Callable[[Any], Any]
    act: Callable[[np.ndarray], np.ndarray]


class _Leaf(NamedTuple):
    shape: tuple[int, ...]
    dtype: np.dtype
    convert: Callable[[np.ndarray], np.ndarray]


def _refuse(name: str, what: str, space, why: str = "") -> EnvSpecError:
    shown = " ".join(repr(space).split())
    return EnvSpecError(f"env {name}: {what} space {shown} cannot be mapped{why}")


def _one_hot(n: int, start: int) -> Callable[[np.ndarray], np.ndarray]:
    eye = np.eye(n, dtype=np.float32)
    return lambda x: eye[np.asarray(x, np.int64) - start]


def _cast(dtype: np.dtype) -> Callable[[np.ndarray], np.ndarray]:
    # A copy: a vector env may write its next batch into the buffer it returned.
    return lambda x: np.array(x, dtype)


def _leaf(space, name: str, what: str) -> _Leaf:
    """How one observation array maps, or a refusal."""
    if isinstance(space, spaces.Discrete):
        n = int(space.n)
        return _Leaf((n,), np.dtype(np.float32), _one_hot(n, int(space.start)))
    if isinstance(space, spaces.MultiBinary):
        shape = tuple(int(d) for d in space.shape)
        return _Leaf(shape, np.dtype(np.float32), _cast(np.dtype(np.float32)))
    if isinstance(space, spaces.Box):
        dtype = np.dtype(space.dtype)
        dtype = _DEVICE_DTYPE.get(dtype, dtype)
        return _Leaf(tuple(int(d) for d in space.shape), dtype, _cast(dtype))
    raise _refuse(name, what, space, f" (an observation is a {_MAPPED})")


def _observation(space, name: str) -> tuple[Any, Any, Callable[[Any], Any]]:
    """(shape, dtype, observe) of an observation space; dicts by key for a Dict."""
    if not isinstance(space, spaces.Dict):
        leaf = _leaf(space, name, "observation")
        return leaf.shape, leaf.dtype, leaf.convert
    if not space.spaces:
        raise _refuse(name, "observation", space, " (an empty Dict)")
    leaves = {key: _leaf(sub, name, f"observation[{key!r}]") for key, sub in space.spaces.items()}

    def observe(obs):
        return {key: leaf.convert(obs[key]) for key, leaf in leaves.items()}

    shapes = {key: leaf.shape for key, leaf in leaves.items()}
    return shapes, {key: leaf.dtype for key, leaf in leaves.items()}, observe


def _discrete_act(start: int) -> Callable[[np.ndarray], np.ndarray]:
    return lambda a: np.asarray(a, np.int64) + start


def map_spaces(name: str, observation_space, action_space) -> HostSpaces:
    """The spec of one env of `name` (its single, unbatched spaces) and the conversions of
    its batches; an EnvSpecError of one line for a space that cannot be mapped."""
    obs_shape, obs_dtype, observe = _observation(observation_space, name)
    if isinstance(action_space, spaces.Discrete):
        spec = EnvSpec(obs_shape, obs_dtype, True, int(action_space.n), (), np.dtype(np.int32))
        return HostSpaces(spec, observe, _discrete_act(int(action_space.start)))
    if not isinstance(action_space, spaces.Box):
        raise _refuse(name, "action", action_space, " (an action is a Discrete or a float Box)")
    env_dtype = np.dtype(action_space.dtype)
    if not np.issubdtype(env_dtype, np.floating):
        raise _refuse(name, "action", action_space, " (a Box of actions must be float)")
    shape = tuple(int(d) for d in action_space.shape)
    low = np.broadcast_to(np.asarray(action_space.low, np.float32), shape)
    high = np.broadcast_to(np.asarray(action_space.high, np.float32), shape)
    spec = EnvSpec(obs_shape, obs_dtype, False, 0, shape, np.dtype(np.float32), low, high)
    return HostSpaces(spec, observe, _cast(env_dtype))


# What a host env returns, against what its spaces declare. The adapter compares shapes
# on every step (`shapes_fit`: a few tuples); `mismatch` says what broke the space, and
# how, once a step failed that check or failed inside the vector env.


def shape_of(value: Any) -> tuple[int, ...] | None:
    """`np.shape(value)`; None for a ragged sequence."""
    try:
        return np.shape(value)
    except (ValueError, TypeError):  # a ragged sequence
        return None


def _shown(value: Any) -> str:
    """`value`'s shape and dtype as numpy sees them (or its type, where it is no array)."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError):  # a ragged sequence
        return f"type {type(value).__name__} (no array)"
    return f"shape {array.shape}, dtype {array.dtype}"


def obs_shapes(space, *leading: int) -> Any:
    """The shape of an observation of `space` (by key for a Dict), after `leading` axes:
    `obs_shapes(space)` one env's, `obs_shapes(space, num_envs)` a batch's."""
    if isinstance(space, spaces.Dict):
        return {key: obs_shapes(sub, *leading) for key, sub in space.spaces.items()}
    return (*leading, *space.shape)


def shapes_fit(value: Any, shapes: Any) -> bool:
    """Whether `value` has the shapes `obs_shapes` gave (shapes only: the adapter casts
    dtypes). The adapter's check of every step."""
    if isinstance(shapes, dict):
        return isinstance(value, dict) and all(
            key in value and shape_of(value[key]) == shape for key, shape in shapes.items()
        )
    return shape_of(value) == shapes


def _fits(value: Any, space, num_envs: int | None) -> bool:
    if num_envs is not None:  # a batch: shapes only (the adapter casts dtypes)
        return shape_of(value) == (num_envs, *space.shape)
    try:  # one env's, by the rule Gymnasium's vector envs batch it by
        array = np.asarray(value)
    except (ValueError, TypeError):
        return False
    return array.shape == tuple(space.shape) and np.can_cast(array.dtype, space.dtype, "same_kind")


def mismatch(
    value: Any,
    space,
    num_envs: int | None = None,
    what: str = "an observation",
    where: str = "its observation_space",
) -> str | None:
    """`value` against the (single) observation space its env declares: None where it
    fits; else a line of what it returned and what the space declares ("returned an
    observation of shape (3,), dtype float64; its observation_space declares (4,),
    float32"). One env's observation (`num_envs` None) fits with the space's shape and a
    dtype that casts to the space's within its kind, as Gymnasium's vector envs batch it;
    a batch of `num_envs` (`what` "observations") with shape [num_envs, *shape]."""
    if isinstance(space, spaces.Dict):
        if not isinstance(value, dict):
            return f"returned {what} of {_shown(value)}; {where} declares a Dict"
        for key, sub in space.spaces.items():
            if key not in value:
                return f"returned {what} without {key!r}; {where} declares {list(space.spaces)}"
            found = mismatch(value[key], sub, num_envs, f"{what}[{key!r}]", f"{where}[{key!r}]")
            if found is not None:
                return found
        return None
    if getattr(space, "shape", None) is None or _fits(value, space, num_envs):
        return None
    declared = f"{tuple(space.shape)}, {np.dtype(space.dtype)}"
    if num_envs is None:
        return f"returned {what} of {_shown(value)}; {where} declares {declared}"
    return (
        f"returned {what} of {_shown(value)} for its {num_envs} envs; "
        f"{where} declares {declared} for each"
    )


def flags_mismatch(reward: Any, terminated: Any, truncated: Any, num_envs: int) -> str | None:
    """A vector env's rewards and flags: None where each is one per env ([num_envs]); else
    a line of which is not, and what it returned."""
    for what, value in (("rewards", reward), ("terminated", terminated), ("truncated", truncated)):
        if shape_of(value) != (num_envs,):
            return (
                f"returned {what} of {_shown(value)} for its {num_envs} envs; "
                f"one per env is shape ({num_envs},)"
            )
    return None
