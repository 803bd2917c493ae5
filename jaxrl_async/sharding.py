"""How a run is laid out over devices: a 1-D mesh whose axis splits the env batch.

Env states, observations, trajectories and replays are split along AXIS; parameters,
keys and counters are replicated. Programs run under `jax.shard_map` over the mesh,
so each device holds its slice of the envs and gradients are averaged with pmean.
Every reduction over devices is explicit (psum/pmean): shard_map's varying-type
checks are off (`pipeline.make_pipeline`).
"""

from __future__ import annotations

import jax

AXIS = "data"  # the mesh axis the env batch is split over


def make_mesh(num_devices: int = 0) -> jax.sharding.Mesh:
    """A 1-D mesh over the first `num_devices` devices (0: all of them).

    In one process these are its local devices. With several processes
    (`jax.distributed`) the mesh spans every device of every process, so each process
    steps the envs of its own devices and the gradients are averaged over all of them;
    a mesh that left a process out would leave it nothing to run, hence all or nothing.
    """
    devices = jax.devices()
    n = len(devices) if num_devices == 0 else num_devices
    if jax.process_count() > 1 and n != len(devices):
        raise ValueError(f"asked for {n} devices; a mesh over {jax.process_count()} processes "
                         f"takes all {len(devices)}")
    if not 1 <= n <= len(devices):
        raise ValueError(f"asked for {n} devices, {len(devices)} available")
    return jax.make_mesh((n,), (AXIS,), devices=devices[:n])
