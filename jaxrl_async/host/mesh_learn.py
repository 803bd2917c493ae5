"""The host learner's update over its mesh: the agent's own `learn`, per device on a slice
of each round's envs, as the JAX pipeline's `learn` runs.

A round's trajectory [T, B, ...] is split over the mesh's axis (`sharding.AXIS`) on B,
B / N envs per device; the learner state and the key are replicated. On N > 1 devices the
agent was built with `axis_name=AXIS` (`executor.make_host_agent`), so its gradients and
metrics are averaged over the devices with `lax.pmean` and every device ends in the same
state: the update of the whole batch on one device, to float rounding. The mapping is the
pipeline's own (`program.on_mesh`, `program._map_over_mesh`'s specs for `learn`).

On one device nothing is mapped: `learn` is jitted as it is, its state and trajectories
on that device, which is what a host run did before it had a mesh.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
from jax.sharding import NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from jaxrl_async.pipeline.program import on_mesh
from jaxrl_async.pipeline.sharding import AXIS
from jaxrl_async.types import LearnFn

TRAJECTORY = P(None, AXIS)  # [T, B, ...]: envs split over the devices
SEEDS_TRAJECTORY = P(None, None, AXIS)  # seed-batched runs' [N, T, B, ...]


class MeshLearn(NamedTuple):
    """The learner's update and where its inputs live."""

    learn: LearnFn  # jitted: (state, trajectory, key) -> LearnOutput, replicated out
    state_at: Any  # the learner state's sharding: replicated over the mesh
    batch_at: Any  # a round's trajectory's: split on B over the mesh


def mesh_learn(learn: LearnFn, mesh: jax.sharding.Mesh, seeds: bool = False) -> MeshLearn:
    """`learn` (an agent's, built with axis_name=AXIS where the mesh has more than one
    device) jitted over `mesh`; with `seeds`, a vmapped one, whose trajectories
    [N, T, B, ...] split on B."""
    if mesh.size == 1:
        one = SingleDeviceSharding(mesh.devices.flat[0])
        return MeshLearn(jax.jit(learn), one, one)
    batch = SEEDS_TRAJECTORY if seeds else TRAJECTORY
    mapped = on_mesh(mesh, learn, (P(), batch, P()), P())
    return MeshLearn(jax.jit(mapped), NamedSharding(mesh, P()), NamedSharding(mesh, batch))


def one_device(tree: Any) -> Any:
    """`tree` (the learner's replicated parameters) as arrays on one device each: the
    first device's copy, so publishing them to the actors (and the evaluation) moves no
    data on a fused run. Why not `jax.device_put` to the actors' device: the copy keeps
    the mesh in its abstract value, and the actors' programs, compiled for one device,
    then fail to lower against a mesh of several."""

    def first(x):
        if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1:
            return x.addressable_shards[0].data
        return x

    return jax.tree.map(first, tree)
