"""Aggregate scores of runs over tasks, with stratified-bootstrap confidence intervals.

The definitions follow Agarwal et al., "Deep Reinforcement Learning at the Edge of the
Statistical Precipice" (NeurIPS 2021), as its reference implementation rliable does:

- scores are given per task (a stratum): one score per run of that task;
- the IQM is the 25% trimmed mean of every run of every task together;
- the optimality gap is the mean shortfall of the scores below `gamma` (1, for normalised
  scores);
- an interval resamples the runs of each task with replacement, independently per task
  (the stratified bootstrap), and takes the percentiles of the statistic over resamples;
- the probability of improvement P(X > Y) is, per task, the chance that a random run of X
  scores above a random run of Y (ties count half: the Mann-Whitney U statistic over the
  product of the two sample sizes), averaged over the tasks both share;
- a performance profile is, per threshold tau, the fraction of runs scoring above tau,
  averaged over tasks.

Everything is a pure function of numpy arrays; randomness comes from an explicit seed.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as scipy_stats

CONFIDENCE = 0.95
RESAMPLES = 2000
# Resamples evaluated at once: bounds the memory of P(X > Y), [batch, runs of X, runs of Y].
BATCH = 250

Strata = Sequence[ArrayLike]  # per task, its runs' scores


def iqm(scores, axis: int = -1):
    """The interquartile mean: the mean of the middle 50% of the scores."""
    return scipy_stats.trim_mean(scores, 0.25, axis=axis)


def optimality_gap(scores, axis: int = -1, gamma: float = 1.0):
    """The mean amount by which the scores fall short of `gamma` (scores above count 0)."""
    return np.mean(np.maximum(gamma - np.asarray(scores), 0.0), axis=axis)


# The aggregates a report gives for every group, each a statistic over the last axis.
AGGREGATES: dict[str, Callable] = {
    "iqm": iqm,
    "mean": lambda x, axis=-1: np.mean(x, axis=axis),
    "median": lambda x, axis=-1: np.median(x, axis=axis),
}


def _arrays(strata: Strata) -> list[np.ndarray]:
    arrays = [np.asarray(s, np.float64).ravel() for s in strata]
    if not arrays or any(a.size == 0 for a in arrays):
        raise ValueError("every task needs at least one score")
    return arrays


def _bootstrap(data: list[np.ndarray], statistic, seed: int, resamples: int, confidence: float):
    """The percentile interval of `statistic(*data, axis=-1)` over stratified resamples.

    A stratum with one run has nothing to resample (scipy needs two observations), so it
    stays fixed in every resample.
    """
    varied = [i for i, a in enumerate(data) if a.size > 1]
    point = float(statistic(*data, axis=-1))
    if not varied:
        return point, (point, point)

    def resampled(*samples, axis=-1):
        shape = np.shape(samples[0])[:-1]
        full = list(data)
        for i, sample in zip(varied, samples):
            full[i] = sample
        full = [np.broadcast_to(a, (*shape, a.shape[-1])) for a in full]
        return statistic(*full, axis=axis)

    with warnings.catch_warnings():  # all-equal scores: a zero-width interval, not a warning
        warnings.simplefilter("ignore", scipy_stats.DegenerateDataWarning)
        result = scipy_stats.bootstrap(
            [data[i] for i in varied],
            resampled,
            n_resamples=resamples,
            confidence_level=confidence,
            method="percentile",
            vectorized=True,
            batch=BATCH,
            rng=np.random.default_rng(seed),
        )
    low, high = result.confidence_interval
    return point, (float(low), float(high))


def interval(
    strata: Strata,
    statistic: Callable,
    *,
    seed: int = 0,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
) -> tuple[float, tuple[float, float]]:
    """(point estimate, (low, high)): `statistic` of all runs of all tasks together, and
    its stratified-bootstrap percentile interval at `confidence`."""

    def pooled(*samples, axis=-1):
        return statistic(np.concatenate(samples, axis=axis), axis=axis)

    return _bootstrap(_arrays(strata), pooled, seed, resamples, confidence)


def _poi_pair(x, y, axis=-1):
    """P(x > y) + P(x = y) / 2 for one task, over the last axis of both."""
    x, y = np.expand_dims(x, -1), np.expand_dims(y, -2)
    return np.mean((x > y) + 0.5 * (x == y), axis=(-2, -1))


def probability_of_improvement(
    x: Strata,
    y: Strata,
    *,
    seed: int = 0,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
) -> tuple[float, tuple[float, float]]:
    """P(X > Y) averaged over tasks, with its interval: `x[i]` and `y[i]` are the scores of
    the same task i, each resampled on its own."""
    xs, ys = _arrays(x), _arrays(y)
    if len(xs) != len(ys):
        raise ValueError("x and y need the same tasks")
    tasks = len(xs)

    def statistic(*samples, axis=-1):
        return sum(_poi_pair(samples[i], samples[tasks + i]) for i in range(tasks)) / tasks

    return _bootstrap([*xs, *ys], statistic, seed, resamples, confidence)


def performance_profile(strata: Strata, taus) -> np.ndarray:
    """[len(taus)]: per threshold, the fraction of runs scoring above it, averaged over tasks."""
    taus = np.asarray(taus, np.float64)
    return np.mean([np.mean(a[None, :] > taus[:, None], axis=1) for a in _arrays(strata)], axis=0)


def normalize(returns, low: float, high: float):
    """Scores on the scale where `low` (a random policy) is 0 and `high` is 1."""
    return (np.asarray(returns, np.float64) - low) / (high - low)


def describe(strata: Strata, *, gap: bool = False, seed: int = 0) -> dict:
    """Every aggregate with its interval: {"iqm": x, "iqm_ci": [low, high], ...}; with
    `gap`, also the optimality gap (of normalised scores)."""
    statistics = dict(AGGREGATES)
    if gap:
        statistics["optimality_gap"] = optimality_gap
    out: dict = {}
    for name, statistic in statistics.items():
        point, (low, high) = interval(strata, statistic, seed=seed)
        out[name], out[f"{name}_ci"] = point, [low, high]
    return out


def finite(values: Sequence[float | None]) -> list[float]:
    """The values that are numbers (a seed that finished no episode has none)."""
    return [float(v) for v in values if v is not None and math.isfinite(v)]
