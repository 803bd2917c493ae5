"""An actor's policy: the agent's `act` compiled for the actor's envs, called once a
vector step, its output fetched to the host.

On a host the policy is a small program called thousands of times a second, and what it
costs is mostly per call and per array, not per env: the dispatch flattens the arguments'
pytrees and hands each array to the runtime, and the fetch waits for and copies each
result array on its own. So the policy takes the parameters as one flat vector (made once
a round, `prepare`) and returns its whole output (carry, action, extras) as one byte
buffer, fetched in one transfer and read back as numpy views of it (`fetch`). The bytes
are the arrays' own, so every action, log-probability and carry is bit for bit the
program's: nothing about the run changes but the number of transfers.

Randomness follows the JAX rollout's rule: the key of global step s is the actor key
folded with s, and each env's key that one folded with the env's global index, so the
actions do not depend on how the envs are split over actor threads or groups.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from jaxrl_async.types import ActorClock, ActOutput, Agent, Memory


class Prepared(NamedTuple):
    """Parameters as a policy call takes them: one flat vector where the leaves share a
    dtype (`flat`, `unravel` rebuilding the tree inside the program), else the tree."""

    flat: Any
    unravel: Any  # None: `flat` is the parameter tree itself


class _Field(NamedTuple):
    """Where one output array lies in the fetched bytes."""

    start: int
    stop: int
    dtype: np.dtype
    shape: tuple[int, ...]


def _as_bytes(tree: Any) -> jax.Array:
    """Every array of `tree`, in leaf order, as one uint8 vector of its bytes."""
    parts = []
    for leaf in jax.tree.leaves(tree):
        leaf = leaf.astype(jnp.uint8) if leaf.dtype == jnp.bool_ else leaf
        parts.append(jax.lax.bitcast_convert_type(leaf, jnp.uint8).reshape(-1))
    return jnp.concatenate(parts) if parts else jnp.zeros((0,), jnp.uint8)


def _fields(shapes: Any) -> list[_Field]:
    """Each output leaf's byte range, dtype and shape, as `_as_bytes` lays them out."""
    fields, start = [], 0
    for leaf in jax.tree.leaves(shapes):
        dtype = np.dtype(leaf.dtype)
        stop = start + int(np.prod(leaf.shape, dtype=np.int64)) * dtype.itemsize
        fields.append(_Field(start, stop, dtype, tuple(leaf.shape)))
        start = stop
    return fields


class ActorPolicy:
    """policy(prepared, memory, obs [B_k, ...], step) -> ActOutput in numpy: the agent's
    `act` at global step `step` for the envs from global index `first_env` on, of
    `num_envs` in the run, jitted (compiled on the device its parameters are on).
    `memory` is the envs' Memory [B_k, ...] (None for a memoryless agent, whose carry is
    then None). `dispatch` launches a call and returns at once; `fetch` waits for its
    result, so an actor can step other envs in between (`groups.py`)."""

    def __init__(
        self, agent: Agent, key: jax.Array, first_env: int, local_envs: int, num_envs: int
    ):
        index = first_env + jnp.arange(local_envs, dtype=jnp.int32)

        def act(params, memory, obs, step) -> ActOutput:
            step_key = jax.random.fold_in(key, step)
            keys = jax.vmap(jax.random.fold_in, (None, 0))(step_key, index)
            clock = ActorClock(step * num_envs, index, num_envs)
            carry, episode_start = (None, None) if memory is None else memory
            return agent.act(params, carry, obs, episode_start, keys, clock)

        self._act = act
        self._program: Any = None
        self._fields: list[_Field] = []
        self._treedef: Any = None
        self._ravel = jax.jit(lambda params: ravel_pytree(params)[0])
        self._unravel: Any = None

    def prepare(self, params: Any) -> Prepared:
        """The parameters as calls take them: raveled on their device when every leaf
        shares a dtype (so raveling loses nothing), the tree as it is otherwise. Every
        round's parameters have the first's structure, so its `unravel` serves them all."""
        if len({leaf.dtype for leaf in jax.tree.leaves(params)}) != 1:
            return Prepared(params, None)
        if self._unravel is None:
            self._unravel = ravel_pytree(params)[1]
        return Prepared(self._ravel(params), self._unravel)

    def dispatch(self, prepared: Prepared, memory: Memory | None, obs: Any, step) -> jax.Array:
        """Launch the call; its output's bytes, computed asynchronously."""
        if self._program is None:
            self._compile(prepared, memory, obs, step)
        return self._program(prepared.flat, memory, obs, step)

    def fetch(self, pending: jax.Array) -> ActOutput:
        """The output of a dispatched call, in numpy: one transfer, read as views."""
        raw = np.asarray(pending)
        leaves = [raw[f.start : f.stop].view(f.dtype).reshape(f.shape) for f in self._fields]
        return jax.tree.unflatten(self._treedef, leaves)

    def __call__(self, prepared: Prepared, memory: Memory | None, obs: Any, step) -> ActOutput:
        return self.fetch(self.dispatch(prepared, memory, obs, step))

    def _compile(self, prepared: Prepared, memory, obs, step) -> None:
        """The program for parameters prepared as `prepared`, and the output's layout."""
        unravel = prepared.unravel

        def tree_act(params, memory, obs, step) -> ActOutput:
            return self._act(params if unravel is None else unravel(params), memory, obs, step)

        shapes = jax.eval_shape(tree_act, prepared.flat, memory, obs, step)
        self._fields = _fields(shapes)
        self._treedef = jax.tree.structure(shapes)
        self._program = jax.jit(lambda *args: _as_bytes(tree_act(*args)))
