"""A float32 sum tree with fixed depth, for proportional sampling on the device.

Leaves hold non-negative masses over a power-of-two number of slots. Each
internal node stores two numbers: the sum of its two children and the smallest
positive leaf below it (+inf if none), the latter for the importance weights'
buffer-wide maximum. Levels are separate arrays, `nodes[k]` [2^k, 2] for
k < depth (nodes[0] is the root), so a leaf update touches one row per level.

Invariant, kept by every write: each node's sum is exactly fl(left + right) of
its children as stored, recomputed from them after they change (never adjusted
by a delta). Hence no drift: the tree is a pure function of the leaves, the
root is their float32 tree-sum, and a node has positive sum only if some leaf
below it is positive, which is what keeps `descend` off zero-mass leaves.

All loops are Python loops over the depth, unrolled at trace time.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from flax import struct

SUM, MIN = 0, 1  # the two fields of a node row


@struct.dataclass
class SumTree:
    leaves: jax.Array  # float32 [2^depth]
    nodes: tuple  # nodes[k] float32 [2^k, 2] for k in range(depth): (sum, min positive leaf)


def init(capacity: int) -> SumTree:
    """All-zero tree over `capacity` slots, padded to a power of two (at least 2)."""
    depth = max(1, (capacity - 1).bit_length())
    nodes = tuple(jnp.tile(jnp.array([0.0, jnp.inf], jnp.float32), (2**k, 1))
                  for k in range(depth))
    return SumTree(leaves=jnp.zeros((2**depth,), jnp.float32), nodes=nodes)


def num_leaves(tree: SumTree) -> int:
    return tree.leaves.shape[-1]


def depth(tree: SumTree) -> int:
    return len(tree.nodes)


def total(tree: SumTree) -> jax.Array:
    """float32 [] the root: the float32 tree-sum of all leaves."""
    return tree.nodes[0][0, SUM]


def min_positive(tree: SumTree) -> jax.Array:
    """float32 [] the smallest positive leaf, +inf if none."""
    return tree.nodes[0][0, MIN]


def _from_leaf_pairs(pairs):
    """Node rows [..., 2] from leaf pairs [..., 2]."""
    positive = jnp.where(pairs > 0, pairs, jnp.inf)
    return jnp.stack([pairs[..., 0] + pairs[..., 1], positive.min(-1)], axis=-1)


def _from_node_pairs(pairs):
    """Node rows [..., 2] from child rows [..., 2 children, 2 fields]."""
    return jnp.stack([pairs[..., 0, SUM] + pairs[..., 1, SUM],
                      jnp.minimum(pairs[..., 0, MIN], pairs[..., 1, MIN])], axis=-1)


def _children(tree: SumTree, level: int, parents: jax.Array | None):
    """Rows of level `level` from its children; all of them when `parents` is None."""
    if level == depth(tree) - 1:
        pairs = tree.leaves.reshape(-1, 2)
        combine = _from_leaf_pairs
    else:
        pairs = tree.nodes[level + 1].reshape(-1, 2, 2)
        combine = _from_node_pairs
    if parents is not None:
        # Rows for dropped (out-of-range) parents are computed but never written.
        pairs = pairs.at[parents].get(mode="fill", fill_value=0.0)
    return combine(pairs)


def set_leaves(tree: SumTree, slots: jax.Array, values: jax.Array, *,
               distinct: bool) -> SumTree:
    """Set leaves `slots` int32 [batch] to `values` [batch] (≥ 0) and recompute their ancestors.

    Slots ≥ num_leaves are ignored. `distinct=True` promises no slot repeats (the
    ring's write slots). Otherwise a repeated slot gets the largest of its
    values: a zero then a max scatter, both order-independent, so the result is
    the same on every backend however its scatter orders duplicates.
    """
    if distinct:
        leaves = tree.leaves.at[slots].set(values, mode="drop", unique_indices=True)
    else:
        leaves = tree.leaves.at[slots].set(0.0, mode="drop").at[slots].max(values, mode="drop")
    tree = tree.replace(leaves=leaves)
    batch = slots.shape[0]
    nodes = list(tree.nodes)
    for level in reversed(range(depth(tree))):
        # A level no wider than the batch is cheaper to rebuild whole than to scatter into;
        # the rows come out the same either way.
        if 2**level <= batch:
            nodes[level] = _children(tree, level, None)
        else:
            parents = slots >> (depth(tree) - level)  # an out-of-range slot stays out of range
            rows = _children(tree, level, parents)
            nodes[level] = nodes[level].at[parents].set(rows, mode="drop")
        tree = tree.replace(nodes=tuple(nodes))
    return tree


def descend(tree: SumTree, targets: jax.Array) -> jax.Array:
    """int32 [batch] the leaf whose cumulative-mass interval holds each target [batch].

    A target is a point in [0, total). Float32 rounding may leave a target at or
    beyond the mass of the node it reached; the step then goes to the side with
    mass, so a descent from a positive root always ends on a positive leaf.
    """
    node = jnp.zeros(targets.shape, jnp.int32)
    remaining = targets
    for level in range(1, depth(tree) + 1):
        if level == depth(tree):
            pairs = tree.leaves.reshape(-1, 2).at[node].get(mode="promise_in_bounds")
        else:
            rows = tree.nodes[level].reshape(-1, 2, 2).at[node].get(mode="promise_in_bounds")
            pairs = rows[..., SUM]
        left, right = pairs[..., 0], pairs[..., 1]
        go_right = ((remaining >= left) & (right > 0)) | (left <= 0)
        remaining = jnp.where(go_right, remaining - left, remaining)
        node = 2 * node + go_right.astype(jnp.int32)
        # Materialise each level's result: fused freely, XLA recomputes the whole path
        # above inside every level's gather, which is quadratic in the depth.
        node, remaining = jax.lax.optimization_barrier((node, remaining))
    return node


def search_prefix_sums(tree: SumTree, make_targets: Callable[[jax.Array], jax.Array]):
    """(leaves int32 [batch], total): the alternative sampler, O(num_leaves) per call.

    Prefix sums of all leaves, then a binary search for each target from
    `make_targets(total)`. Kept to compare against `descend` on each backend.
    Its total is the prefix sum's last entry, which may differ from the root in
    the last bits; a zero leaf can never be the first prefix sum above a target,
    and a target past the end goes to the last positive leaf.
    """
    prefix = jnp.cumsum(tree.leaves)
    grand_total = prefix[-1]
    found = jnp.searchsorted(prefix, make_targets(grand_total), side="right",
                             method="scan_unrolled")
    last_positive = num_leaves(tree) - 1 - jnp.argmax(tree.leaves[::-1] > 0)
    found = jnp.minimum(found, last_positive).astype(jnp.int32)
    return jnp.where(tree.leaves[found] > 0, found, last_positive).astype(jnp.int32), grand_total


def rebuild(leaves: jax.Array) -> SumTree:
    """The tree over `leaves` [2^depth] computed from scratch (for checks and bulk loads)."""
    tree = SumTree(leaves=leaves, nodes=(None,) * max(1, (leaves.shape[-1] - 1).bit_length()))
    nodes = list(tree.nodes)
    for level in reversed(range(depth(tree))):
        nodes[level] = _children(tree, level, None)
        tree = tree.replace(nodes=tuple(nodes))
    return tree
