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
import jax.numpy as jnp

AXIS = "data"  # the mesh axis the env batch is split over


@functools.cache
def lower_mulhi_on_meshes() -> None:
    """Let Philox keys compile in programs over several CPU devices.

    Philox's rounds take the high half of 32-bit products (`lax.mulhi`), which JAX 0.10
    lowers to `chlo.mulhi`; in a program over several devices (shard_map, a sharded jit)
    that op fails to legalize on the CPU ("Unable to convert MHLO to StableHLO"). There
    this lowers it as JAX's own fallback does, a product in twice the width shifted right
    (`_mulhi_widened`): the same bits. Programs on one device keep `chlo.mulhi` (the same
    HLO as without this), as do 64-bit integers, which no PRNG multiplies. Public JAX
    only: `jax.interpreters.mlir`'s lowering registry and `jax.extend.mlir`'s dialects."""
    from jax.extend.mlir.dialects import chlo
    from jax.interpreters import mlir

    # A scalar operand (Philox's multipliers): broadcast, then lowered here again.
    broadcast = mlir.lower_fun(
        lambda x, y: jax.lax.mulhi(*jnp.broadcast_arrays(x, y)), multiple_results=False
    )

    def lowering(ctx, x, y):
        if ctx.avals_in[0].shape != ctx.avals_in[1].shape:
            return broadcast(ctx, x, y)
        wide = jnp.iinfo(ctx.avals_in[0].dtype).bits <= 32
        if wide and _device_count(ctx.module_context.axis_context) > 1:
            return [_mulhi_widened(x, y)]
        return [chlo.mulhi(x, y)]

    mlir.register_lowering(jax.lax.mulhi_p, lowering, platform="cpu")


def _device_count(axis_context) -> int:
    """The devices a program being lowered runs on: a sharded jit's, a shard_map's mesh."""
    devices = getattr(axis_context, "num_devices", None)
    if devices is None:
        mesh = getattr(axis_context, "mesh", None)
        devices = 1 if mesh is None else mesh.size
    return devices


def _mulhi_widened(x, y):
    """The high half of the products of two integer tensors of one type (at most 32 bits),
    as IR: both converted to twice the width (sign-extended where signed), multiplied,
    shifted right by the width, converted back."""
    from jax.extend.mlir import ir
    from jax.extend.mlir.dialects import stablehlo as hlo

    narrow = ir.RankedTensorType(x.type)
    element = ir.IntegerType(narrow.element_type)
    bits = element.width
    if element.is_unsigned:
        wide_element, shift = ir.IntegerType.get_unsigned(2 * bits), hlo.shift_right_logical
    else:
        wide_element, shift = ir.IntegerType.get_signless(2 * bits), hlo.shift_right_arithmetic
    wide = ir.RankedTensorType.get(narrow.shape, wide_element)
    product = hlo.multiply(hlo.convert(wide, x), hlo.convert(wide, y))
    width = hlo.constant(
        ir.DenseElementsAttr.get_splat(wide, ir.IntegerAttr.get(wide_element, bits))
    )
    return hlo.convert(narrow, shift(product, width))


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
