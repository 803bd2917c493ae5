"""Episode returns and lengths counted on the host: raw scores, whatever the learner is
later given (clipped rewards, episodic lives)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class EpisodeTotals(NamedTuple):
    """The running return (float64) and length (int64) of each env's episode [B]."""

    returns: np.ndarray
    lengths: np.ndarray


def episodes_init(num_envs: int) -> EpisodeTotals:
    return EpisodeTotals(np.zeros(num_envs, np.float64), np.zeros(num_envs, np.int64))


def episodes_update(
    totals: EpisodeTotals, reward: np.ndarray, done: np.ndarray, valid: np.ndarray
) -> tuple[EpisodeTotals, np.ndarray, np.ndarray]:
    """Count one step: (new totals, return and length of the episodes that ended at it).

    Only `valid` steps count; the ended episodes' figures are 0 where none ended [B].
    """
    returns = totals.returns + np.where(valid, np.asarray(reward, np.float64), 0.0)
    lengths = totals.lengths + valid.astype(np.int64)
    ended_return = np.where(done, returns, 0.0)
    ended_length = np.where(done, lengths, 0)
    totals = EpisodeTotals(np.where(done, 0.0, returns), np.where(done, 0, lengths))
    return totals, ended_return, ended_length
