"""A sweep group's runs (`RunGroup`) and their hyperparameters in a learner state, for
either engine: runs that differ in seed and hyperparameter values train side by side."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import jax
import numpy as np

from jaxrl_async.errors import UserError
from jaxrl_async.training.log import Point


@dataclasses.dataclass(frozen=True)
class RunGroup:
    """Runs that differ in seed and hyperparameter values but share one compiled program
    (a sweep's structural group, `sweeps.py`): the config's train.num_seeds counts them all.

    Run k starts from key `seeds[k]` (a point's seeds repeat the single run's, so point p
    equals that run up to float rounding) and trains with `hparams[field][k]` for each
    swept field of the agent (its SWEEPABLE ones, traced values of the learner state).
    """

    seeds: tuple[int, ...]
    hparams: dict[str, tuple[float, ...]]
    points: tuple[Point, ...]


def learner_with_hparams(learner, hparams: Mapping[str, Sequence[float]]):
    """The agent's learner state (seed-batched: [N] runs) with its hyperparameters set per
    run ([N] values a field), placed as the values they replace; a UserError naming
    what is not sweepable."""
    current = learner.hparams
    unknown = sorted(set(hparams) - set(current))
    if unknown:
        raise UserError(
            f"not sweepable: {', '.join(unknown)} (sweepable: {', '.join(sorted(current))})"
        )
    new = {
        k: jax.device_put(np.asarray(v, np.float32), current[k].sharding)
        for k, v in hparams.items()
    }
    return learner.replace(hparams={**current, **new})
