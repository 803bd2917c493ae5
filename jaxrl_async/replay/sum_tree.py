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

from typing import Callable

import jax
import jax.numpy as jnp
from flax import struct

BITS = 4  # binary levels per stored level: rows of 16 float32, one 64-byte cache line


@struct.dataclass
class SumTree:
    leaves: jax.Array  # float32 [2^depth] the masses
    sums: tuple  # float32 [2^d_0], [2^(d_0+bits)], ...: the stored levels above the leaves, top first
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
    widths = [2 ** sum(_fanout_bits(depth, bits)[:r + 1]) for r in range(len(_fanout_bits(depth, bits)))]
    return SumTree(leaves=jnp.zeros((2**depth,), jnp.float32),
                   sums=tuple(jnp.zeros((w,), jnp.float32) for w in widths[:-1]),
                   mins=tuple(jnp.full((w,), jnp.inf, jnp.float32) for w in widths[:-1]))


def num_leaves(tree: SumTree) -> int:
    return tree.leaves.shape[-1]


def _levels(tree: SumTree) -> list[jax.Array]:
    return [*tree.sums, tree.leaves]


def _row_bits(tree: SumTree) -> list[int]:
    """Binary levels spanned by the row under each stored level, top (the root's row) first."""
    widths = [x.shape[-1].bit_length() - 1 for x in _levels(tree)]
    return [widths[0]] + [b - a for a, b in zip(widths, widths[1:])]


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
    top = _levels(tree)[0]
    return top.min() if tree.mins else _positive_min(top)
