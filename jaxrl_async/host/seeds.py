"""Several seeds of a host run side by side (`train.num_seeds > 1`, and a sweep's points).

Run k of a seed-batched host run is the run of seed `seeds[k]` (train.seed + k unless a
sweep gives them): its own envs, stepped by its own actor threads and reset from its
seed, its own actor keys, and its own learner, whose state is slice k of the learner
state every seed's shares: the learners' `init` and `learn` are vmapped over a leading
seed axis and run as one program, as a JAX run's seeds do (`program.vmap_seeds`). So
slice k follows the one-seed run of `seeds[k]` up to float rounding: the same
trajectories, keys and updates, in a batched program. The actors' parameters (and
observation statistics) are published stacked, and each actor acts with its run's slice.

A run of one seed has no seed axis anywhere (`Seeds` None): its programs are those it
had before seeds could be batched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

from jaxrl_async.pipeline.program import seed_keys


def run_seeds(config: Any, seeds: Sequence[int] | None = None) -> tuple[int, ...] | None:
    """The seeds of a run's side-by-side runs (`seeds` where a sweep gives them, else
    train.seed + k for its train.num_seeds); None for a run of one seed."""
    if seeds is not None:
        return tuple(seeds) if len(seeds) > 1 or config.train.num_seeds > 1 else None
    if config.train.num_seeds == 1:
        return None
    return tuple(config.train.seed + k for k in range(config.train.num_seeds))


def run_key(config: Any, seeds: tuple[int, ...] | None) -> jax.Array:
    """The run's key, or its runs' keys [N] (each that of a run of its seed)."""
    if seeds is None:
        return jax.random.key(config.train.seed, impl=config.prng_impl)
    return seed_keys(config.train.seed, len(seeds), config.prng_impl, seeds)


def fold(key: jax.Array, data: int) -> jax.Array:
    """`jax.random.fold_in(key, data)`, of each run's key where `key` holds several."""
    if key.ndim == 0:
        return jax.random.fold_in(key, data)
    return jax.vmap(jax.random.fold_in, (0, None))(key, data)


def batched(fn, seeds: tuple[int, ...] | None):
    """`fn` over a leading seed axis of all its arguments (unchanged for one seed)."""
    return fn if seeds is None else jax.vmap(fn)
