"""Auto-reset for suites whose reset costs far more than a step: computed only for the
envs whose episode ended.

An adapter's step usually ends with `where(done, reset(key), stepped)`, which under vmap
computes a reset for every env on every step. That is fine where a reset costs less than
a step, but Craftax generates a whole world (about 40 of its steps on a CPU), so its
own auto-reset env, which does exactly that, spends nearly all its time on worlds it
throws away. `reset_where` has its own batching rule instead: the ended envs' resets are
computed `chunk(n)` at a time in a loop of as many iterations as needed (none when no
episode ended) and written into place. Every env's reset is the same function of its
own arguments either way. Unbatched it is a `lax.cond`; under a second vmap (several
seeds) the rule folds the new axis into the batch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap


def chunk(n: int, divisor: int = 64) -> int:
    """Resets computed together in a batch of `n` envs: 1 in `divisor` of them. Small,
    as few episodes end per step, but not one at a time, so that a burst of ends takes
    few iterations; a suite whose small batches cost nearly as much as big ones (many
    small ops) wants a smaller divisor."""
    return max(1, n // divisor)


def reset_where(reset, done, args, stepped, divisor: int = 64):
    """`stepped` where not `done`, else `reset(*args)` (a pytree of the structure of
    `stepped`), for one env; `args` a tuple of arrays (keys allowed). The result has the
    reset's types (a Python float or weakly typed leaf of `stepped` is cast), so a state
    keeps its types from step to step. Batched, the resets are computed
    `chunk(n, divisor)` at a time."""
    types = jax.eval_shape(reset, *args)
    stepped = jax.tree.map(_cast, stepped, types)
    return _per_env(reset, divisor)(done, args, stepped)


def _cast(x, like):
    if jax.dtypes.issubdtype(like.dtype, jax.dtypes.prng_key):
        return x
    return jax.lax.convert_element_type(x, like.dtype)


def _per_env(reset, divisor):
    @custom_vmap
    def one(done, args, stepped):
        return jax.lax.cond(done, lambda: reset(*args), lambda: stepped)

    @one.def_vmap
    def rule(axis_size, in_batched, done, args, stepped):
        tree = _all_batched(axis_size, in_batched, (done, args, stepped))
        out = _per_batch(reset, divisor)(*tree)
        return out, jax.tree.map(lambda _: True, out)

    return one


def _per_batch(reset, divisor):
    """`reset_where` over a batch: every argument has the env axis in front."""

    @custom_vmap
    def batch(done, args, stepped):
        n, k = done.shape[0], chunk(done.shape[0], divisor)
        # The ended envs' indices first, then n (out of range: a write there is dropped),
        # padded to whole chunks.
        order = jnp.nonzero(done, size=-(-n // k) * k, fill_value=n)[0]

        def reset_chunk(i, out):
            envs = jax.lax.dynamic_slice(order, (i * k,), (k,))
            fresh = jax.vmap(reset)(*jax.tree.map(lambda x: x[jnp.minimum(envs, n - 1)], args))
            return jax.tree.map(lambda o, f: o.at[envs].set(f, mode="drop"), out, fresh)

        ended = jnp.sum(done, dtype=jnp.int32)
        return jax.lax.fori_loop(0, (ended + k - 1) // k, reset_chunk, stepped)

    @batch.def_vmap
    def rule(axis_size, in_batched, done, args, stepped):
        # A second vmap (seeds): its axis folded into the env axis, one bigger batch.
        tree = _all_batched(axis_size, in_batched, (done, args, stepped))
        folded = jax.tree.map(lambda x: x.reshape((-1, *x.shape[2:])), tree)
        out = jax.tree.map(lambda x: x.reshape((axis_size, -1, *x.shape[1:])), batch(*folded))
        return out, jax.tree.map(lambda _: True, out)

    return batch


def _all_batched(axis_size, in_batched, tree):
    """`tree` with every leaf batched: the unbatched ones broadcast along a new axis 0."""
    return jax.tree.map(
        lambda batched, x: x if batched else jnp.broadcast_to(x, (axis_size, *jnp.shape(x))),
        tuple(in_batched), tree)
