"""How a run is laid out over devices: a 1-D mesh whose axis splits the env batch.

Env states, observations, trajectories and replays are split along AXIS; parameters,
keys and counters are replicated. Programs run under `jax.shard_map` over the mesh,
so each device holds its slice of the envs and gradients are averaged with pmean.
Every reduction over devices is explicit (psum/pmean): shard_map's varying-type
checks are off (`pipeline.make_pipeline`).
"""

from __future__ import annotations

import functools

import jax

AXIS = "data"  # the mesh axis the env batch is split over


@functools.cache
def lower_mulhi_on_meshes() -> None:
    """Let Philox keys compile in programs over several CPU devices.

    Philox's rounds take the high half of 32-bit products (`lax.mulhi`), which JAX 0.10
    lowers to `chlo.mulhi`; in a program over several devices (shard_map, a sharded jit)
    that op fails to legalize on the CPU ("Unable to convert MHLO to StableHLO"). There
    this lowers it as JAX's own fallback does, a 64-bit product shifted right: the same
    bits. Programs on one device keep `chlo.mulhi` (the same HLO as without this)."""
    from jax._src.interpreters import mlir
    from jax._src.lax import lax as lax_internal

    entry = mlir._platform_specific_lowerings["cpu"].get(
        lax_internal.mulhi_p
    ) or mlir._lowerings.get(lax_internal.mulhi_p)
    if entry is None or not hasattr(lax_internal, "_mulhi_impl"):
        return  # another JAX: nothing known to mend
    native = entry.rule
    widened = mlir.lower_fun(lax_internal._mulhi_impl, multiple_results=False)

    def lowering(ctx, *args, **params):
        context = ctx.module_context.axis_context
        devices = getattr(context, "num_devices", None)
        if devices is None:
            mesh = getattr(context, "mesh", None)
            devices = 1 if mesh is None else mesh.size
        return (widened if devices > 1 else native)(ctx, *args, **params)

    mlir.register_lowering(lax_internal.mulhi_p, lowering, platform="cpu")


def make_mesh(num_devices: int = 0) -> jax.sharding.Mesh:
    """A 1-D mesh over the first `num_devices` devices (0: all of them).

    In one process these are its local devices. With several processes
    (`jax.distributed`) the mesh spans every device of every process, so each process
    steps the envs of its own devices and the gradients are averaged over all of them;
    a mesh that left a process out would leave it nothing to run, hence all or nothing.
    """
    lower_mulhi_on_meshes()
    devices = jax.devices()
    n = len(devices) if num_devices == 0 else num_devices
    if jax.process_count() > 1 and n != len(devices):
        raise ValueError(
            f"asked for {n} devices; a mesh over {jax.process_count()} processes "
            f"takes all {len(devices)}"
        )
    if not 1 <= n <= len(devices):
        raise ValueError(f"asked for {n} devices, {len(devices)} available")
    return jax.make_mesh((n,), (AXIS,), devices=devices[:n])
