"""Observation normalisation for host envs (`env.normalize_obs=true`), in numpy.

The statistics follow the JAX pipeline's `envs.wrappers.NormalizeObservation`: a running
mean and variance from zero and one with a count of 1e-4, merged batch by batch
(parallel Welford), observations normalised to (obs - mean) / sqrt(var + 1e-8) and
clipped to ±10. The learner owns them, as it owns the parameters: each actor normalises
what its policy sees, and the trajectory it hands in (a replay agent's keeps raw
observations: its learner normalises each sampled batch, `replay_learner.py`), with the
statistics published with the parameters it acts with, and reports the moments of the
raw observations it acted on; after each round the learner merges every actor's moments
in actor order. So
a slot's statistics are those of every observation acted on before it, whatever the
timing, and a checkpoint holds them with the learner state they belong to.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

CLIP, EPS, PRIOR_COUNT = 10.0, 1e-8, 1e-4


class ObsStats(NamedTuple):
    """One run's statistics, or (train.num_seeds > 1) each seed's stacked on a leading
    axis [N]: every function here takes either."""

    mean: np.ndarray  # float64, the shape of one observation ([N, ...]: each seed's)
    var: np.ndarray
    n: np.ndarray  # float64, the observations counted (the prior's 1e-4 included)


def initial_stats(obs_shape: object, seeds: int | None = None) -> ObsStats:
    """The statistics before any observation, for array observations of `obs_shape` (a
    dict observation is refused before a run starts, `executor.make_host_agent`), for
    one run or (`seeds`) stacked for that many."""
    assert isinstance(obs_shape, tuple), obs_shape
    lead = () if seeds is None else (seeds,)
    shape = (*lead, *obs_shape)
    return ObsStats(np.zeros(shape), np.ones(shape), np.full(lead, PRIOR_COUNT, np.float64))


def seed_slice(stats: ObsStats, k: int) -> ObsStats:
    """Seed k's statistics of seed-stacked ones."""
    return ObsStats(stats.mean[k], stats.var[k], stats.n[k])


def stack(stats: list[ObsStats]) -> ObsStats:
    """Runs' statistics (or moments) stacked on a leading seed axis."""
    return ObsStats(*(np.stack(field) for field in zip(*stats)))


def moments(obs: np.ndarray, obs_shape: tuple[int, ...]) -> ObsStats:
    """The mean, variance and count of a batch of observations [..., *obs_shape]."""
    flat = obs.reshape(-1, *obs_shape).astype(np.float64)
    return ObsStats(flat.mean(0), flat.var(0), np.asarray(len(flat), np.float64))


def merge(stats: ObsStats, batch: ObsStats) -> ObsStats:
    """`stats` updated with a batch's moments (Chan et al.'s parallel variance); stacked
    ones seed by seed."""
    shape = np.shape(stats.n) + (1,) * (np.ndim(stats.mean) - np.ndim(stats.n))
    n, m = np.reshape(stats.n, shape), np.reshape(batch.n, shape)  # against the means
    total = n + m
    delta = batch.mean - stats.mean
    mean = stats.mean + delta * m / total
    m2 = stats.var * n + batch.var * m
    m2 = m2 + np.square(delta) * n * m / total
    return ObsStats(mean, m2 / total, np.asarray(stats.n + batch.n, np.float64))


def normalize(stats: ObsStats, obs: np.ndarray) -> np.ndarray:
    """`obs` under `stats`, as float32, clipped to ±CLIP."""
    z = (obs.astype(np.float64) - stats.mean) / np.sqrt(stats.var + EPS)
    return np.clip(z, -CLIP, CLIP).astype(np.float32)


def from_saved(saved: dict) -> ObsStats:
    """The statistics a checkpoint holds (`ObsStats._asdict()`, restored)."""
    mean, var = np.asarray(saved["mean"], np.float64), np.asarray(saved["var"], np.float64)
    return ObsStats(mean, var, np.asarray(saved["n"], np.float64))
