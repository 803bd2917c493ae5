"""A host run over several processes (`jax.distributed`, `run/distributed.py`).

Every process runs the same run: the learner's mesh spans the devices of every process
(`placement.host_mesh`), and each process steps its share of `env.num_envs`, envs
`process_index * share` on (their global indices, so each env's resets and keys are
those of the one-process run), in its own actor threads. Each round:

- the processes agree whether any of them stopped before its round was whole (`agree`):
  a stop asked, an actor's failure or stall in any process ends every process at that
  round, before any collective of the update could wait for one that is gone;
- each process's trajectories [T, B / P] become the learner's batch [T, B], split on B
  over the mesh as one process's would be (`global_batch`);
- the round's episode sums and actor times (`gathered_record`) and the actors'
  observation moments (`gathered_moments`, merged in process order, then actor order)
  are all-gathered, so every process logs and normalises with the run's whole record.

Values gathered as float64 travel as their bits (int32 pairs): JAX without x64 would
round them to float32, and the statistics must be the same in every process.

With one process none of this runs: `processes() == 1` leaves every path of a
one-process run as it was.
"""

from __future__ import annotations

from typing import Any, Literal

import jax
import numpy as np

from jaxrl_async.errors import ConfigError, RunFailure
from jaxrl_async.host.obs_norm import ObsStats
from jaxrl_async.host.round_times import ACTOR_TIMES

Agreed = Literal["go", "stop", "failed"]


def processes() -> int:
    return jax.process_count()


def process_envs(config: Any) -> tuple[int, int]:
    """(the global index of this process's first env, how many envs it steps)."""
    share = config.env.num_envs // processes()
    return jax.process_index() * share, share


def check_processes(config: Any) -> None:
    """One-line ConfigErrors for a host run over several processes that cannot run: a
    mesh that leaves devices out, the split layout, envs that do not split evenly over
    the processes (or over each one's actor threads), several seeds side by side."""
    count, name = processes(), config.env.name
    if count == 1:
        return
    devices = jax.device_count()
    refusals = [
        (
            (config.pipeline.devices or 1) != devices,
            f"pipeline.devices={config.pipeline.devices}: a run over {count} processes "
            f"learns on all {devices} devices (set pipeline.devices={devices})",
        ),
        (
            config.pipeline.placement == "split",
            "pipeline.placement=split runs in one process; use fused with several processes",
        ),
        (
            config.env.num_envs % count != 0,
            f"env.num_envs={config.env.num_envs} does not split over {count} processes",
        ),
        (
            config.env.num_envs // count < config.pipeline.actor_threads,
            f"pipeline.actor_threads={config.pipeline.actor_threads} exceeds the "
            f"{config.env.num_envs // count} envs of each of {count} processes",
        ),
        (config.train.num_seeds > 1, "train.num_seeds > 1 runs in one process"),
    ]
    for refused, why in refusals:
        if refused:
            raise ConfigError(f"host env {name}: {why}")


def _allgather(x: np.ndarray) -> np.ndarray:
    """Every process's `x` (the same shape in all), stacked [P, ...] in process order; a
    collective. float64 travels as its bits."""
    from jax.experimental import multihost_utils

    x = np.ascontiguousarray(x)
    wide = x.dtype == np.float64
    sent = x.view(np.int32) if wide else x
    got = np.asarray(multihost_utils.process_allgather(sent, tiled=False))
    return got.view(np.float64) if wide else got


def agree(stopped: bool, failed: bool) -> Agreed:
    """What every process does with this round: "failed" where any process's actors
    failed or stalled, else "stop" where any stopped, else "go"; a collective."""
    flags = _allgather(np.asarray([stopped, failed], np.int32))
    if flags[:, 1].any():
        return "failed"
    return "stop" if flags[:, 0].any() else "go"


def failed_elsewhere() -> RunFailure:
    """What a process whose actors are well raises when another's failed (that process
    raises its own actor's one-line error)."""
    return RunFailure(
        f"process {jax.process_index()} of {processes()} stops: another process's actors "
        "failed or stalled (its error names the env)"
    )


def gathered_record(record: dict) -> dict:
    """A round's record with the episode sums of every process added up and the actor
    times the slowest process's."""
    sums = ("episodes", "episode_return_sum", "episode_length_sum")
    times = ACTOR_TIMES
    local = np.asarray([record[k] for k in (*sums, *times)], np.float64)
    every = _allgather(local)
    total, slowest = every[:, : len(sums)].sum(0), every[:, len(sums) :].max(0)
    out = {**record, **dict(zip(sums, total.tolist())), **dict(zip(times, slowest.tolist()))}
    out["episodes"] = int(out["episodes"])
    episodes = out["episodes"]
    out["episode_return"] = out["episode_return_sum"] / episodes if episodes else np.nan
    return out


def gathered_moments(moments: list[ObsStats]) -> list[ObsStats]:
    """Every process's actors' observation moments, in process order, then actor order."""
    fields = [_allgather(np.stack(field)) for field in zip(*moments)]  # each [P, A, ...]
    return [
        ObsStats(*(f[p, a] for f in fields))
        for p in range(fields[0].shape[0])
        for a in range(fields[0].shape[1])
    ]


def global_batch(tree: Any, sharding: Any) -> Any:
    """This process's part of a round's batch (numpy, [T, B / P, ...]) as the learner's
    global [T, B, ...] array on `sharding`, each process's envs on its own devices."""
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, x), tree)


def replicated(tree: Any, sharding: Any) -> Any:
    """`tree` (the same in every process: a learner state, a key) on the mesh's replicated
    `sharding`, built from each process's own copy; typed keys through their key data."""

    def one(x):
        if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            data = np.asarray(jax.random.key_data(x))
            placed = jax.make_array_from_process_local_data(sharding, data)
            return jax.random.wrap_key_data(placed, impl=jax.random.key_impl(x))
        return jax.make_array_from_process_local_data(sharding, np.asarray(x))

    return jax.tree.map(one, tree)
