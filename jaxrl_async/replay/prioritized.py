"""Proportional prioritized replay (Schaul et al. 2016, "Prioritized Experience Replay").

Item i is drawn with probability P(i) = p_i^α / Σ_k p_k^α, one stratified draw
per equal segment of the total mass, and weighted by
w_i = (N·P(i))^-β / max_j (N·P(j))^-β, the maximum over every filled slot that
can be drawn (P(j) > 0), so weights lie in (0, 1]. α is fixed per buffer (the
tree stores p^α); β is an argument of `sample` and may be traced.

The items live in a `ring.RingState`; p^α of every slot lives in a sum tree
(`sum_tree.py`) whose shape is fixed at trace time: add, sample and
update_priorities are straight-line programs, with no while loops. Every
internal sum is recomputed from its children, never accumulated by deltas, so
the root is exactly the float32 tree-sum of the leaves, and a descent only ever
enters nodes of positive mass: empty and zero-priority slots are never drawn.

Priorities are sanitised, not rejected (these functions run inside jit, where
nothing can be raised at run time): NaN, ±inf and negative priorities become 0,
so the slot is not drawn until it gets a positive priority; p^α below float32's
smallest normal number (1.2e-38) counts as 0, and above 2^100 is capped, so the
total of any buffer that fits in memory stays finite.

Sharding over D devices: each device holds its own buffer of capacity/D, adds
its own items and draws batch/D items from its own tree, inside `jax.shard_map`
(or a vmap with a named axis). Pass `axis_name` to `sample`: a draw from shard
d then reports its true probability p_i^α / (D · Σ_{k in d} p_k^α), and the
weights' maximum is taken over all shards, so the importance correction stays
exact; pass it to `add` and `update_priorities` to share the running maximum
priority. Stack the D shard states on a leading axis sharded over the mesh axis
("data": in_specs P("data")) and index [0] inside the mapped function.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl_async.replay import ring, sum_tree
from jaxrl_async.types import Sample

MAX_LEAF = 2.0**100  # p^α cap: 2^27 leaves of it still sum below float32's 2^128 limit
SAMPLERS = ("tree", "cumsum")


class PrioritizedState(struct.PyTreeNode):
    ring: ring.RingState  # the items; filled slots are [0, ring.size)
    tree: sum_tree.SumTree  # p^α of every slot (0 when empty), over capacity padded to 2^k
    max_priority: jax.Array  # float32 [] the largest priority seen; new items get it
    alpha: float = struct.field(pytree_node=False, default=0.6)


def init(
    capacity: int, example_item, alpha: float = 0.6, initial_priority: float = 1.0
) -> PrioritizedState:
    """An empty buffer. Items added before any priority is known get `initial_priority`."""
    if not (isinstance(alpha, (int, float)) and alpha >= 0):
        raise ValueError(f"prioritized.init: alpha must be a number >= 0, got {alpha!r}")
    if not initial_priority > 0:
        raise ValueError(f"prioritized.init: initial_priority must be > 0, got {initial_priority}")
    return PrioritizedState(
        ring=ring.init(capacity, example_item),
        tree=sum_tree.init(capacity),
        max_priority=jnp.float32(initial_priority),
        alpha=float(alpha),
    )


def size(state: PrioritizedState) -> jax.Array:
    """int32 [] filled slots."""
    return state.ring.size


def can_sample(state: PrioritizedState, min_size: int = 1) -> jax.Array:
    """bool []: at least `min_size` slots are filled and some filled slot has positive priority."""
    return (state.ring.size >= min_size) & (sum_tree.total(state.tree) > 0)


def total_priority(state: PrioritizedState) -> jax.Array:
    """float32 [] Σ p^α over the buffer, the root of the tree."""
    return sum_tree.total(state.tree)


def _leaf_values(priorities, alpha: float):
    """(sanitised priorities, p^α) as float32; see the module docstring."""
    p = jnp.asarray(priorities, jnp.float32)
    p = jnp.where(jnp.isfinite(p) & (p > 0), p, 0.0)
    # 0^0 would be 1: a zero priority must stay undrawable for every alpha.
    powered = p if alpha == 1.0 else jnp.where(p > 0, p**alpha, 0.0)
    # XLA on CPU treats subnormals as zero in arithmetic; make them zero everywhere.
    powered = jnp.where(powered >= jnp.finfo(jnp.float32).tiny, powered, 0.0)
    return p, jnp.minimum(powered, MAX_LEAF)


def _sync_max(max_priority, axis_name):
    return max_priority if axis_name is None else jax.lax.pmax(max_priority, axis_name)


def add(
    state: PrioritizedState,
    items,
    priorities: jax.Array | None = None,
    *,
    axis_name: str | None = None,
) -> PrioritizedState:
    """Write a batch (leaves [batch, ...]) as `ring.add` does, with priorities [batch].

    Without priorities the new items get the largest priority seen so far. With
    `axis_name`, that maximum is shared by all shards.
    """
    batch = ring.batch_size_of(state.ring, items, "prioritized.add")
    slots, first = ring.write_slots(state.ring, batch)
    max_priority = state.max_priority
    if priorities is None:
        _, leaf = _leaf_values(max_priority, state.alpha)
        values = jnp.broadcast_to(leaf, slots.shape)
    else:
        if jnp.shape(priorities) != (batch,):
            raise ValueError(
                f"prioritized.add: priorities have shape {jnp.shape(priorities)}, "
                f"expected ({batch},)"
            )
        p, values = _leaf_values(priorities[first:], state.alpha)
        max_priority = _sync_max(jnp.maximum(max_priority, p.max()), axis_name)
    return state.replace(
        ring=ring.add(state.ring, items),
        tree=sum_tree.set_leaves(state.tree, slots, values, distinct=True),
        max_priority=max_priority,
    )


def update_priorities(
    state: PrioritizedState,
    indices: jax.Array,
    priorities: jax.Array,
    *,
    axis_name: str | None = None,
) -> PrioritizedState:
    """Set the priorities of slots `indices` int32 [batch] to `priorities` [batch].

    Indices outside the filled slots [0, size) are ignored. When an index repeats
    within the batch, its largest priority wins, whatever the order: the result
    is deterministic on every backend. With `axis_name`, indices are this shard's
    own (as its `sample` returned them) and the running maximum is shared.
    """
    if jnp.shape(indices) != jnp.shape(priorities) or jnp.ndim(indices) != 1:
        raise ValueError(
            f"prioritized.update_priorities: indices {jnp.shape(indices)} and "
            f"priorities {jnp.shape(priorities)} must both be [batch]"
        )
    indices = jnp.asarray(indices, jnp.int32)
    filled = (indices >= 0) & (indices < state.ring.size)
    p, values = _leaf_values(priorities, state.alpha)
    slots = jnp.where(filled, indices, sum_tree.num_leaves(state.tree))  # out of range: dropped
    max_priority = jnp.maximum(state.max_priority, jnp.where(filled, p, 0.0).max())
    return state.replace(
        tree=sum_tree.set_leaves(state.tree, slots, values, distinct=False),
        max_priority=_sync_max(max_priority, axis_name),
    )


def sample(
    state: PrioritizedState,
    key: jax.Array,
    batch_size: int,
    beta: float | jax.Array,
    *,
    axis_name: str | None = None,
    method: str = "tree",
) -> Sample:
    """Draw `batch_size` slots, one per equal segment of the total mass.

    Returns a `Sample`: items [batch, ...], indices int32 [batch], probabilities
    [batch] (the probability of each draw, p_i^α / Σ p^α, or with `axis_name`
    the sharded probability in the module docstring) and weights [batch].
    `method` is "tree" (descend the sum tree, O(batch · log capacity)) or
    "cumsum" (prefix sums of all leaves and a binary search, O(capacity)); both
    draw the same distribution. The buffer must hold a positive priority (see
    `can_sample`); otherwise every probability and weight is 0. With
    `axis_name`, pass the same key on every shard: each folds in its index.
    """
    if method not in SAMPLERS:
        raise ValueError(f"prioritized.sample: method must be one of {SAMPLERS}, got {method!r}")
    if axis_name is not None:
        key = jax.random.fold_in(key, jax.lax.axis_index(axis_name))
    if method == "tree":
        total = sum_tree.total(state.tree)
        slots, leaf = sum_tree.descend(state.tree, _stratified_targets(key, batch_size, total))
    else:
        slots, leaf, total = sum_tree.search_prefix_sums(
            state.tree, lambda total: _stratified_targets(key, batch_size, total)
        )
    shards = 1 if axis_name is None else jax.lax.axis_size(axis_name)
    safe_total = jnp.where(total > 0, total, 1.0)
    probabilities = jnp.where(total > 0, leaf / safe_total / shards, 0.0)
    # The largest weight belongs to the least probable drawable slot (N cancels).
    min_probability = sum_tree.min_positive(state.tree) / safe_total / shards
    if axis_name is not None:
        min_probability = jax.lax.pmin(min_probability, axis_name)
    ratio = probabilities / jnp.where(probabilities > 0, min_probability, 1.0)
    weights = jnp.where(probabilities > 0, ratio ** -jnp.asarray(beta, jnp.float32), 0.0)
    return Sample(
        items=ring.gather(state.ring, slots),
        indices=slots,
        probabilities=probabilities,
        weights=weights,
    )


def _stratified_targets(key, batch_size: int, total):
    """float32 [batch] one uniform point in each of `batch_size` equal segments of [0, total)."""
    offsets = jax.random.uniform(key, (batch_size,), jnp.float32)
    return (jnp.arange(batch_size, dtype=jnp.float32) + offsets) * (total / batch_size)
