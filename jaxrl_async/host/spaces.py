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
