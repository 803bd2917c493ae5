"""Where a host run acts and learns: the actors' device and the learner's mesh.

The actor threads' policy runs on one device; the learner runs the agent's `learn` on a
1-D mesh (the pipeline's, axis `sharding.AXIS`) of `pipeline.devices` devices (0: one;
`config/host_devices.py`), each holding its slice of every round's envs
(`host/mesh_learn.py`):

- fused ("fused", and "auto"): the mesh is the first `pipeline.devices` devices, and the
  actors act on the first of them.
- split: the actors act on the first device, alone; the mesh is the next
  `pipeline.devices`, as the JAX split places its learner after its actor devices
  (`split.split_meshes`). A host run's actors act on one device
  (`pipeline.actor_devices` must be 1).

`auto` is fused for a host run: its actor threads already overlap the learner, and the
JAX path's auto split (which overlaps the two halves of a compiled tick on two CPU
devices) has no host-run benchmark showing that moving the policy calls off the
learner's first device pays. Every check on the count but the machine's own device count
runs when the config loads (`config/host_devices.check_host_devices`).
"""

from __future__ import annotations

from typing import Any

import jax

from jaxrl_async.config.host_devices import host_run_devices
from jaxrl_async.config.loader import Config
from jaxrl_async.errors import ConfigError
from jaxrl_async.host.processes import check_processes
from jaxrl_async.pipeline.layout import Layout
from jaxrl_async.pipeline.sharding import make_mesh
from jaxrl_async.pipeline.split import split_meshes

WHY = "host envs: the actors' policy on the first device, the learner on its mesh"
# pipeline.actor_processes: each child acts on its own CPU (`actor_process.py`)
PROCESSES_WHY = "host envs: each actor's policy on its own process's CPU, the learner on its mesh"


def host_placement(config: Config) -> str:
    """ "split" or "fused", as the run records it ("auto" is fused)."""
    return "split" if config.pipeline.placement == "split" else "fused"


def host_mesh(config: Config) -> jax.sharding.Mesh:
    """The learner's mesh (the pipeline's `make_mesh` / `split_meshes`); a one-line
    ConfigError where this machine has too few devices."""
    _check_machine(config)
    if host_placement(config) == "split":
        return split_meshes(host_run_devices(config), 1)[1]
    return make_mesh(host_run_devices(config))


def host_devices(config: Config) -> tuple[Any, ...]:
    """(the actors' device, *the learner mesh's devices); a one-line ConfigError where this
    machine has too few. Fused, the actors' device is the mesh's first of this process's
    (with several processes each acts on its own first device, `processes.py`)."""
    mesh = host_mesh(config)
    return (jax.local_devices()[0], *mesh.devices.flat)


def host_layout(config: Config) -> Layout:
    """The run's Layout, as a JAX run's plan carries it: `devices` every device the run
    spans, `learner_devices` the mesh's (what its checkpoints record as `devices`)."""
    _check_machine(config)
    placement = host_placement(config)
    actor_devices = 1 if placement == "split" else 0
    devices = host_run_devices(config)
    why = PROCESSES_WHY if config.pipeline.actor_processes else WHY
    return Layout(devices, placement, actor_devices, jax.default_backend(), why, why)


def _check_machine(config: Config) -> None:
    """A one-line ConfigError unless this machine (every process's devices) has the run's
    devices, and a run over several processes is one they can run (`processes.py`)."""
    check_processes(config)
    available = jax.device_count()
    wanted = host_run_devices(config)
    if wanted > available:
        learning = f"pipeline.devices={config.pipeline.devices or 1}"
        what = f"{learning} needs {wanted} devices"
        if host_placement(config) == "split":
            what = f"pipeline.placement=split needs {wanted} devices (1 acting, {learning})"
        platform = jax.devices()[0].platform
        raise ConfigError(
            f"host env {config.env.name}: {what}, this machine has {available} ({platform})"
        )
