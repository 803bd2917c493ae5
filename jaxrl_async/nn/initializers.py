"""Orthogonal initialisation whose QR factorisations never run batched.

jaxlib computes a batched QR on the CPU (`jax.vmap` of an orthogonal init: the twin
critics of `QEnsemble`, the seeds of `train.num_seeds`) by handing the matrices to XLA's
intra-op thread pool and waiting for them on a thread of that same pool. In a program
over several devices every pool thread can be running a device's share (a forced
2-device CPU mesh on 2 cores), and then each waits for pool work that no thread is free
to run: SAC's init on two devices hung for good. Here, under vmap, the matrices are
factorised one after another (`lax.map`) on the device's own thread: the same LAPACK
call per matrix, so the same values bit for bit as the batched init.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap


def orthogonal(scale: float = 1.0):
    """`jax.nn.initializers.orthogonal(scale)` (the same values), sequential under vmap."""
    base = jax.nn.initializers.orthogonal(scale)

    def init(key, shape, dtype=jnp.float32):
        @custom_vmap
        def draw(key):
            return base(key, shape, dtype)

        @draw.def_vmap
        def draw_batched(axis_size, in_batched, key):
            del axis_size
            if not in_batched[0]:
                return draw(key), False
            return jax.lax.map(draw, key), True

        return draw(key)

    return init
