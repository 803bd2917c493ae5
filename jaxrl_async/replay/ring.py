"""Fixed-capacity ring buffer on the device: pure functions over a `RingState` pytree.

Items are any pytree; the buffer stores each leaf as one array [capacity, ...].
Slots fill in order 0, 1, 2, ... and then wrap, so the filled slots are always
exactly [0, size). The capacity is the stored arrays' leading dimension, fixed
when the program is traced; nothing here needs static_argnums.

Off-policy use: `add` a batch of transitions, `sample` uniformly from the filled
slots. On-policy use (the pipeline's double buffer): `add` a whole trajectory
as one item and read it back with `latest`.

`add` writes only the batch's slots (a scatter of O(batch) rows). Inside a
jitted scan, or a jit with the state donated, XLA updates the buffer in place;
without donation a jit boundary must copy the whole buffer, so donate it.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jax.tree_util import PyTreeDef

from jaxrl_async.types import Sample


class RingState(struct.PyTreeNode):
    items: Any  # pytree of [capacity, ...] arrays, in the example item's structure
    position: jax.Array  # int32 [] the slot the next item goes to
    size: jax.Array  # int32 [] filled slots, at most capacity; they are [0, size)


def init(capacity: int, example_item) -> RingState:
    """An empty buffer of `capacity` slots shaped and typed like `example_item` (no batch axis)."""
    if not isinstance(capacity, int) or capacity < 1:
        raise ValueError(f"ring.init: capacity must be a positive int, got {capacity!r}")
    items = jax.tree.map(
        lambda x: jnp.zeros((capacity, *jnp.shape(x)), jnp.result_type(x)), example_item
    )
    return RingState(items=items, position=jnp.int32(0), size=jnp.int32(0))


def capacity(state: RingState) -> int:
    """The number of slots, a Python int (read from the stored arrays' shapes)."""
    return jax.tree.leaves(state.items)[0].shape[0]


def size(state: RingState) -> jax.Array:
    """int32 [] filled slots."""
    return state.size


def can_sample(state: RingState, min_size: int = 1) -> jax.Array:
    """bool []: at least `min_size` slots are filled (sampling an empty buffer is undefined)."""
    return state.size >= min_size


def batch_size_of(state: RingState, items, name: str = "ring.add") -> int:
    """The leading batch axis of `items`, after checking them against the stored item spec."""
    # Annotated: jaxlib ships no stub for PyTreeDef, which mypy then cannot compare.
    treedef: PyTreeDef
    stored, treedef = jax.tree.flatten(state.items)
    given, given_def = jax.tree.flatten(items)
    if treedef != given_def:
        raise ValueError(f"{name}: items have structure {given_def}, the buffer stores {treedef}")
    batch = None
    for buf, x in zip(stored, given):
        if x.ndim != buf.ndim or x.shape[1:] != buf.shape[1:] or x.dtype != buf.dtype:
            raise ValueError(
                f"{name}: an item leaf is {x.dtype}{list(x.shape)}, expected "
                f"{buf.dtype}[batch, {', '.join(map(str, buf.shape[1:]))}]"
            )
        if batch is not None and x.shape[0] != batch:
            raise ValueError(
                f"{name}: item leaves disagree on the batch size ({batch} and {x.shape[0]})"
            )
        batch = x.shape[0]
    if batch is None:
        raise ValueError(f"{name}: items have no array leaves")
    return batch


def write_slots(state: RingState, batch: int) -> tuple[jax.Array, int]:
    """(slots, first): where `add` puts a batch of `batch` items.

    slots int32 [min(batch, capacity)] are distinct; they receive items[first:].
    A batch larger than the buffer keeps only its last `capacity` items, as adding
    them one by one would.
    """
    cap = capacity(state)
    first = max(0, batch - cap)
    slots = (state.position + jnp.arange(first, batch, dtype=jnp.int32)) % cap
    return slots, first


def add(state: RingState, items) -> RingState:
    """Write a batch (every leaf [batch, ...]) at the write position, wrapping around."""
    batch = batch_size_of(state, items)
    cap = capacity(state)
    slots, first = write_slots(state, batch)
    # The slots are distinct and in range, which lets XLA emit a plain in-place scatter.
    stored = jax.tree.map(
        lambda buf, x: buf.at[slots].set(x[first:], unique_indices=True, mode="promise_in_bounds"),
        state.items,
        items,
    )
    return RingState(
        items=stored,
        position=(state.position + batch) % cap,
        size=jnp.minimum(state.size + batch, cap),
    )


def gather(state: RingState, indices: jax.Array):
    """The items in `indices` (int32 [batch], each in [0, capacity)) as a pytree of [batch, ...]."""
    return jax.tree.map(lambda buf: jnp.take(buf, indices, axis=0, mode="clip"), state.items)


def sample(state: RingState, key: jax.Array, batch_size: int) -> Sample:
    """`batch_size` slots drawn uniformly, with replacement, from the filled ones.

    The buffer must hold at least one item (see `can_sample`); an empty buffer
    returns slot 0 (zeros) with probability and weight 0.
    """
    filled = jnp.maximum(state.size, 1)
    indices = jax.random.randint(key, (batch_size,), 0, filled, dtype=jnp.int32)
    probability = jnp.where(state.size > 0, 1.0 / filled.astype(jnp.float32), 0.0)
    return Sample(
        items=gather(state, indices),
        indices=indices,
        probabilities=jnp.full((batch_size,), probability, jnp.float32),
        weights=jnp.full((batch_size,), state.size > 0, jnp.float32),
    )


def latest(state: RingState, age: int | jax.Array = 0):
    """The item `age` places before the newest one (0: the newest), without a batch axis.

    The pipeline's double buffer stores one whole trajectory [T, B, ...] per slot;
    the learner reads the slot the actor filled on the previous tick with
    `latest(state, 1)` after this tick's `add`. Reads one slot, never the buffer.
    """
    slot = (state.position - 1 - age) % capacity(state)
    return jax.tree.map(
        lambda buf: jax.lax.dynamic_index_in_dim(buf, slot, keepdims=False), state.items
    )
