"""What a run holds on each device, counted before anything is allocated, and the check
that it fits.

The bytes come from the run's own programs traced abstractly (`jax.eval_shape` of the
pipeline's init and of its rollout), never from formulas kept beside them, so a new
field of the state is counted the day it is added. Each leaf counts the shard one device
holds (its sharding's shard shape); typed PRNG keys count their key data.

Counted: every array of the initial state (what a checkpoint saves) and the trajectory a
tick writes, which lives only inside the training program. Not counted: XLA's other
temporaries (activations and gradients of an update, fused buffers), so a run that fits
with little to spare may still run out.
"""

from __future__ import annotations

import dataclasses
import math
import os

import jax

from jaxrl_async.errors import UserError
from jaxrl_async.pipeline.program import seed_keys

PARTS = ("replay", "trajectories", "env states", "parameters", "optimizer state", "other")
# The key that shrinks each part most directly, named in a refusal.
SHRINK = {
    "replay": "replay.capacity",
    "trajectories": "pipeline.rollout_len",
    "env states": "env.num_envs",
    "parameters": "agent.hidden_sizes",
    "optimizer state": "agent.hidden_sizes",
    "other": "env.num_envs",
}
# PipelineState fields by part; the learner's leaves split by name (`_learner_part`).
_FIELD_PART = {
    "replay": "replay",
    "window": "trajectories",
    "in_flight": "trajectories",
    "env_state": "env states",
    "obs": "env states",
    "memory": "env states",
    "actor_queue": "parameters",
}


@dataclasses.dataclass(frozen=True)
class Footprint:
    """Bytes per device by part (PARTS), and the whole state's bytes over all devices."""

    state: dict[str, int]  # the initial state's arrays on one device, by part
    tick_trajectory: int  # the trajectory one tick writes on one device (in the program)
    state_bytes: int  # the whole state over all devices: what a checkpoint saves

    @property
    def parts(self) -> dict[str, int]:
        parts = dict(self.state)
        parts["trajectories"] += self.tick_trajectory
        return parts

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    @property
    def largest(self) -> str:
        parts = self.parts
        return max(parts, key=lambda k: parts[k])


def _elements(x) -> tuple[int, int]:
    """(bytes per element, elements per device) of an abstract or concrete array."""
    shape = x.shape
    sharding = getattr(x, "sharding", None)
    if sharding is not None:
        shape = sharding.shard_shape(shape)
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        data = jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct((), x.dtype))
        return data.dtype.itemsize * math.prod(data.shape), math.prod(shape)
    return x.dtype.itemsize, math.prod(shape)


def device_bytes(x) -> int:
    """Bytes of `x` (abstract or concrete) on one device that holds it."""
    itemsize, count = _elements(x)
    return itemsize * count


def global_bytes(x) -> int:
    """Bytes of `x` over all devices, each element once (typed keys as key data)."""
    itemsize, _ = _elements(x)
    return itemsize * math.prod(x.shape)


def learner_parts(learner) -> dict[str, int]:
    """Bytes per device of a learner state, by part: its optimizer's (every leaf under a
    field named for it, `opt_state`, `critic_opt`) and its parameters (the rest: online,
    target, hyperparameters, counters)."""
    parts = dict.fromkeys(PARTS, 0)
    for path, leaf in jax.tree_util.tree_flatten_with_path(learner)[0]:
        names = "/".join(str(getattr(p, "name", getattr(p, "key", p))) for p in path)
        parts["optimizer state" if "opt" in names else "parameters"] += device_bytes(leaf)
    return parts


def state_parts(state) -> dict[str, int]:
    """Bytes per device of a PipelineState (abstract or concrete), by part."""
    parts = dict.fromkeys(PARTS, 0)
    for field in dataclasses.fields(state):
        value = getattr(state, field.name)
        if field.name == "learner":
            for part, n in learner_parts(value).items():
                parts[part] += n
            continue
        part = _FIELD_PART.get(field.name, "other")
        parts[part] += sum(device_bytes(leaf) for leaf in jax.tree.leaves(value))
    return parts


def _one_seed(x):
    """An abstract leaf of seed-vmapped state [N, ...] as one seed's, laid out alike."""
    spec = jax.sharding.PartitionSpec(*x.sharding.spec[1:])
    sharding = jax.sharding.NamedSharding(x.sharding.mesh, spec)
    return jax.ShapeDtypeStruct(x.shape[1:], x.dtype, sharding=sharding)


def pipeline_footprint(pipeline, key, num_seeds: int = 1) -> Footprint:
    """The Footprint of a run of `pipeline` (seed-vmapped for num_seeds > 1) started from
    `key` (keys [N] for seeds), traced, not run."""
    state = jax.eval_shape(pipeline.init, key)
    one = state
    if num_seeds > 1:  # the rollout is not seed-vmapped: trace it for one seed
        one = jax.tree.map(_one_seed, state)
    traj = jax.eval_shape(
        pipeline.rollout, one.learner.params, one.env_state, one.obs, one.memory, one.key
    )[3]
    per_device = sum(global_bytes(x) for x in jax.tree.leaves(traj)) // pipeline.mesh.size
    return Footprint(
        state_parts(state),
        per_device * num_seeds,
        sum(global_bytes(x) for x in jax.tree.leaves(state)),
    )


def run_footprint(config, pipelines) -> Footprint:
    """The Footprint of the device that holds most among the run's `pipelines` (split
    placement: the actor's and the learner's, each initialised whole on its mesh)."""
    seeds = config.train.num_seeds
    key = jax.eval_shape(
        lambda: (
            jax.random.key(0, impl=config.prng_impl)
            if seeds == 1
            else seed_keys(0, seeds, config.prng_impl)
        )
    )
    prints = [pipeline_footprint(p, key, seeds) for p in pipelines if p is not None]
    return max(prints, key=lambda f: f.total)


def gib(n: int) -> str:
    """Bytes in the unit that reads best (B, KiB, MiB, GiB)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def device_memory(devices) -> tuple[int, str] | None:
    """(bytes one device may use, what that is) for the run's `devices`, or None where
    neither JAX nor the OS says. CPU devices share the host's RAM, split evenly here."""
    device = devices[0]
    if device.platform == "cpu":
        try:
            ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):
            return None
        return ram // len(devices), f"{gib(ram)} of host RAM over {len(devices)} CPU device(s)"
    stats = device.memory_stats() or {}
    limit = stats.get("bytes_limit")
    if not limit:
        return None
    return int(limit), f"{gib(int(limit))} per {device.platform.upper()} device"


def check_run_fits(config, pipelines, devices) -> None:
    """Refuse (one-line UserError) a run of `pipelines` that cannot fit in `devices`."""
    check_fits(run_footprint(config, pipelines), devices, config.train.num_seeds)


def check_fits(footprint: Footprint, devices, num_seeds: int = 1) -> None:
    """Raise a one-line UserError if `footprint` cannot fit in `devices`' memory."""
    memory = device_memory(devices)
    if memory is None or footprint.total <= memory[0]:
        return
    part = footprint.largest
    key = "train.num_seeds" if num_seeds > 1 and part != "replay" else SHRINK[part]
    raise UserError(
        f"the run needs {gib(footprint.total)} per device ({part} "
        f"{gib(footprint.parts[part])}), more than {memory[1]}: shrink {key} "
        f"(jaxrl-async plan shows every part)"
    )
