"""A float32 sum tree of fixed depth, for proportional sampling on the device.

The tree is binary over 2^depth leaves (the capacity padded to a power of two),
but only every `bits`-th level is stored: a stored node's children are a row of
2^bits nodes one stored level down, and the binary levels in between are
recomputed from that row when needed. A row is one or two cache lines, so a
descent or an update touches depth/bits rows instead of depth scattered
nodes, and the whole tree costs about 2/(2^bits - 1) floats per leaf beyond the
leaves themselves. Each stored node also keeps the smallest positive leaf below
it (+inf if none), for the importance weights' buffer-wide maximum.

Invariant, kept by every write: a node is exactly the float32 sum of its row
added in binary-tree order, fl(fl(a+b) + fl(c+d)) and so on, recomputed from
the row after it changes, never adjusted by a delta. The tree is therefore a
pure function of the leaves, with no drift; the root is their float32
binary-tree sum; and a (sub-)node has positive mass only if a leaf below it
does, which keeps `descend` off zero-mass leaves.

Loops are Python loops over the fixed depth, unrolled at trace time: no while
loops, no data-dependent control flow.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import struct

BITS = 4  # binary levels per stored level: rows of 16 float32, one 64-byte cache line


class SumTree(struct.PyTreeNode):
    leaves: jax.Array  # float32 [2^depth] the masses
    sums: tuple  # float32 [2^b0], [2^(b0+bits)], ...: stored levels above the leaves, top first
    mins: tuple  # like sums: the smallest positive leaf below each stored node, +inf if none


def _fanout_bits(depth: int, bits: int) -> list[int]:
    """Binary levels spanned by each row, top first: the top row takes the remainder."""
    top = depth - bits * ((depth - 1) // bits)
    return [top] + [bits] * ((depth - 1) // bits)


def init(capacity: int, bits: int = BITS) -> SumTree:
    """All-zero tree over `capacity` slots, padded to a power of two (at least 2)."""
    if capacity < 1 or bits < 1:
        raise ValueError(f"sum_tree.init: need capacity >= 1 and bits >= 1, got {capacity}, {bits}")
    depth = max(1, (capacity - 1).bit_length())
    fanout = _fanout_bits(depth, bits)
    widths = [2 ** sum(fanout[: r + 1]) for r in range(len(fanout))]
    return SumTree(
        leaves=jnp.zeros((2**depth,), jnp.float32),
        sums=tuple(jnp.zeros((w,), jnp.float32) for w in widths[:-1]),
        mins=tuple(jnp.full((w,), jnp.inf, jnp.float32) for w in widths[:-1]),
    )


def num_leaves(tree: SumTree) -> int:
    return tree.leaves.shape[-1]


def _levels(tree: SumTree) -> list[jax.Array]:
    return [*tree.sums, tree.leaves]


def _row_bits(tree: SumTree) -> list[int]:
    """Binary levels spanned by the row under each stored level, top (the root's row) first."""
    widths = [x.shape[-1].bit_length() - 1 for x in _levels(tree)]
    return [widths[0]] + [b - a for a, b in itertools.pairwise(widths)]


def _pairwise_sum(row):
    """[..., 2^f] -> [...]: the row's binary-tree sum, in the tree's fixed order."""
    while row.shape[-1] > 1:
        row = row[..., 0::2] + row[..., 1::2]
    return row[..., 0]


def _positive_min(row):
    return jnp.where(row > 0, row, jnp.inf).min(axis=-1)


def total(tree: SumTree) -> jax.Array:
    """float32 [] the root: the float32 binary-tree sum of all leaves."""
    return _pairwise_sum(_levels(tree)[0])


def min_positive(tree: SumTree) -> jax.Array:
    """float32 [] the smallest positive leaf, +inf if none."""
    return tree.mins[0].min() if tree.mins else _positive_min(tree.leaves)


def _materialize(x):
    """x unchanged (x >= 0), computed into its own buffer.

    XLA (CPU) otherwise fuses each level's index arithmetic into the next
    level's gather and recomputes the whole path above it, random draws
    included, at every level: quadratic in the depth, several times slower.
    A reduction is never fused into its consumers, so this one cuts the chain.
    """
    return jnp.stack([x, jnp.zeros_like(x)], axis=-1).max(axis=-1)


def _select(bits, candidates):
    """candidates[i] for i written by the bools `bits`, most significant first."""
    for bit in bits:
        half = len(candidates) // 2
        candidates = [jnp.where(bit, candidates[half + i], candidates[i]) for i in range(half)]
    return candidates[0]


def set_leaves(tree: SumTree, slots: jax.Array, values: jax.Array, *, distinct: bool) -> SumTree:
    """Set leaves `slots` int32 [batch] to `values` [batch] (>= 0) and recompute their ancestors.

    Slots >= num_leaves are ignored. `distinct=True` promises no slot repeats (the
    ring's write slots). Otherwise a repeated slot gets the largest of its
    values: a zero then a max scatter, both order-independent, so the result is
    the same on every backend however its scatter orders duplicates.
    """
    if distinct:
        leaves = tree.leaves.at[slots].set(values, mode="drop", unique_indices=True)
    else:
        leaves = tree.leaves.at[slots].set(0.0, mode="drop").at[slots].max(values, mode="drop")
    levels, mins = [*tree.sums, leaves], list(tree.mins)
    row_bits = _row_bits(tree)
    shift = 0
    for r in reversed(range(len(levels) - 1)):
        shift += row_bits[r + 1]
        width = 2 ** row_bits[r + 1]
        child_sums = levels[r + 1].reshape(-1, width)
        child_mins = None if r + 1 == len(levels) - 1 else mins[r + 1].reshape(-1, width)
        # A level no wider than the batch is cheaper to rebuild whole than to scatter into;
        # its nodes come out the same either way.
        if levels[r].shape[0] <= slots.shape[0]:
            levels[r] = _pairwise_sum(child_sums)
            mins[r] = _positive_min(child_sums) if child_mins is None else child_mins.min(-1)
            continue
        parents = slots >> shift  # an out-of-range slot stays out of range, so is dropped
        rows = child_sums.at[parents].get(mode="fill", fill_value=0.0)
        levels[r] = levels[r].at[parents].set(_pairwise_sum(rows), mode="drop")
        row_mins = (
            _positive_min(rows)
            if child_mins is None
            else child_mins.at[parents].get(mode="fill", fill_value=jnp.inf).min(-1)
        )
        mins[r] = mins[r].at[parents].set(row_mins, mode="drop")
    return SumTree(leaves=leaves, sums=tuple(levels[:-1]), mins=tuple(mins))


def descend(tree: SumTree, targets: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(leaves int32 [batch], masses float32 [batch]): the leaf whose cumulative-mass
    interval holds each target [batch], and that leaf's mass.

    Targets are points in [0, total). Float32 rounding may leave a target at or
    beyond the mass of the node it reached; a step then goes to the side with
    mass, so a descent from a positive root always ends on a positive leaf.
    The masses come from the rows the descent read: reading the leaves again
    afterwards would make XLA copy them before an in-place update.
    """
    batch = targets.shape[0]
    node = jnp.zeros((batch,), jnp.int32)
    remaining = _materialize(targets)
    for r, (level, f) in enumerate(zip(_levels(tree), _row_bits(tree))):
        if r == 0:
            row = jnp.broadcast_to(level, (batch, 2**f))
        else:
            row = level.reshape(-1, 2**f).at[node].get(mode="promise_in_bounds")
        # The binary levels inside the row, in the same order the stored sums were added.
        sub_levels = [[row[:, i] for i in range(2**f)]]
        while len(sub_levels[0]) > 1:
            below = sub_levels[0]
            sub_levels.insert(0, [below[2 * i] + below[2 * i + 1] for i in range(len(below) // 2)])
        went_right: list[jax.Array] = []
        for step in range(1, f + 1):
            left = _select(went_right, sub_levels[step][0::2])
            right = _select(went_right, sub_levels[step][1::2])
            go_right = ((remaining >= left) & (right > 0)) | (left <= 0)
            remaining = jnp.where(go_right, remaining - left, remaining)
            went_right.append(go_right)
        offset = sum(bit.astype(jnp.int32) << (f - 1 - i) for i, bit in enumerate(went_right))
        node = _materialize((node << f) + offset)
        remaining = _materialize(remaining)
    return node, _select(went_right, sub_levels[-1])


def search_prefix_sums(tree: SumTree, make_targets: Callable[[jax.Array], jax.Array]):
    """(leaves int32 [batch], masses [batch], total): the alternative sampler, O(num_leaves).

    Prefix sums of all leaves, then a binary search for each target from
    `make_targets(total)`. Kept to compare against `descend` on each backend
    (on CPU it is far slower, and an update after it copies the leaves).
    Its total is the prefix sum's last entry, which may differ from the root in
    the last bits. A zero leaf is never the first prefix sum above a target
    (its sum equals its predecessor's), and a target past the end, or a prefix
    sum made non-monotone by a parallel scan's rounding, falls back to the last
    positive leaf.
    """
    prefix = jnp.cumsum(tree.leaves)
    grand_total = prefix[-1]
    found = jnp.searchsorted(
        prefix, make_targets(grand_total), side="right", method="scan_unrolled"
    )
    last_positive = num_leaves(tree) - 1 - jnp.argmax(tree.leaves[::-1] > 0)
    found = jnp.minimum(found, last_positive).astype(jnp.int32)
    mass, last_mass = tree.leaves[found], tree.leaves[last_positive]
    found = jnp.where(mass > 0, found, last_positive).astype(jnp.int32)
    return found, jnp.where(mass > 0, mass, last_mass), grand_total


def rebuild(leaves: jax.Array, bits: int = BITS) -> SumTree:
    """The tree over `leaves` [2^depth] computed from scratch (for checks and bulk loads)."""
    tree = init(leaves.shape[-1], bits)
    slots = jnp.arange(leaves.shape[-1], dtype=jnp.int32)
    return set_leaves(tree, slots, leaves.astype(jnp.float32), distinct=True)
