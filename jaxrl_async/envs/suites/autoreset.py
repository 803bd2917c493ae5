"""Auto-reset that computes a suite's reset only for the envs whose episode ended.

Written per env as `jnp.where(done, reset(key), state)`, vmap computes the reset for every
env on every step: for a suite whose reset costs about as much as its step (jumanji's
Snake samples a snake and a fruit) that doubles the env's cost. `reset_where` is the same
function per env (a `lax.cond` there), but when vmapped it gathers the envs that ended,
a chunk of them at a time in a loop that runs no pass where none ended, resets those and
scatters them back. Each env is still reset from its own key, so the results are those of
the `jnp.where` form, bit for bit; only the work differs.

What remains is per pass, not per env: on XLA:CPU each suite reset runs its threefry
hashes as rolled loops (tens of microseconds each whatever the batch), and with hundreds
of envs some episode ends on almost every step. Nested vmaps (e.g. `train.num_seeds`
around the env batch) merge into one flat batch.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

# The ended envs are reset this fraction of the batch at a time (a loop of as many
# chunks as needed).
CHUNK = 1 / 16


def strong_types(tree):
    """`tree` with every weakly typed leaf made strong (PRNG keys left alone). A suite whose
    reset leaves a weakly typed leaf that its step makes strong would change its state's
    types from step to step, and a jitted step would compile twice."""
    return jax.tree.map(
        lambda x: (
            x if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else jnp.asarray(x, x.dtype)
        ),
        tree,
    )


def reset_where(reset, done, key, state, *args, fraction: float = CHUNK):
    """`reset(key, *args)` where `done`, else `state` (same structure), for one env.

    `state` takes the reset's types (a weakly typed or Python-float leaf is cast), so a
    state keeps its types from step to step. Batched, the ended envs are reset `fraction`
    of the batch at a time: larger for a suite whose small batches of many small ops cost
    nearly what a big one does (brax on a CPU).
    """
    types = jax.eval_shape(reset, key, *args)
    state = jax.tree.map(lambda x, t: jnp.asarray(x, t.dtype), state, types)

    @custom_vmap
    def one(done, key, state, args):
        return jax.lax.cond(done, lambda: reset(key, *args), lambda: state)

    @one.def_vmap
    def batched(axis_size, in_batched, done, key, state, args):
        operands = _broadcast(axis_size, in_batched, (done, key, state, args))
        return _flat(reset, fraction)(*operands), jax.tree.map(lambda _: True, state)

    return one(done, key, state, args)


def _broadcast(size, in_batched, tree):
    """Give every unbatched leaf of `tree` a leading batch axis of `size`."""
    return jax.tree.map(
        lambda x, b: x if b else jnp.broadcast_to(x, (size, *jnp.shape(x))), tree, tuple(in_batched)
    )


def _flat(reset, fraction: float):
    """`reset_where` over a flat batch (leading axis of every operand); a vmap over it
    (an outer batch) folds into the same flat batch."""

    @custom_vmap
    def flat(done, keys, state, args):
        return _compact(reset, done, keys, state, args, fraction)

    @flat.def_vmap
    def outer(axis_size, in_batched, done, keys, state, args):
        operands = _broadcast(axis_size, in_batched, (done, keys, state, args))
        merged = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), operands)
        out = flat(*merged)
        return (
            jax.tree.map(lambda x: x.reshape(axis_size, -1, *x.shape[1:]), out),
            jax.tree.map(lambda _: True, state),
        )

    return flat


def _compact(reset, done, keys, state, args, fraction: float):
    """Reset the envs of a flat batch that ended, a chunk of them at a time."""
    size = done.shape[0]
    chunk = max(1, math.ceil(size * fraction))
    fresh_all = jax.vmap(reset)
    # Earlier envs score higher; 0 marks one that needs no reset (or no longer does).
    rank = jnp.arange(size, 0, -1, dtype=jnp.int32)

    def body(carry):
        pending, state = carry
        # The first `chunk` pending envs (top_k, not nonzero: XLA:CPU runs nonzero's cumsum
        # as an O(n^2) reduce-window); padding beyond them is out of range, dropped below.
        score, at = jax.lax.top_k(jnp.where(pending, rank, 0), chunk)
        at = jnp.where(score > 0, at, size)
        take = jnp.minimum(at, size - 1)
        fresh = fresh_all(keys[take], *jax.tree.map(lambda x: x[take], args))
        state = jax.tree.map(lambda s, f: s.at[at].set(f, mode="drop"), state, fresh)
        return pending.at[at].set(False, mode="drop"), state

    return jax.lax.while_loop(lambda carry: jnp.any(carry[0]), body, (done, state))[1]
