"""Reference returns of the shipped envs: a normalised score puts a uniform-random policy
at 0 and a reference return at 1, so scores of different envs can be aggregated.

`random`: the mean return of the first episode under uniformly random actions,
measured by `scripts/reference_scores.py` (10,000 episodes, seed 0; it prints the
standard error next to these values). `high`, with its source:

- CartPole-v1: 500, the most an episode can return (reward 1 a step, 500-step limit);
- Acrobot-v1 and MountainCar-v0: Gymnasium's registered `reward_threshold` (-100, -110),
  the return at which it counts the env as solved;
- Pendulum-v1: 0, the bound of its return (no step's reward is above 0);
- Catch-bsuite: 1, the most an episode can return (one ball, +1 if caught).

Left out: the MinAtar games (no known maximum: their levels repeat), envs whose returns
depend on `env.kwargs` (DeepSea, MemoryChain) and those of the optional suites. A run
with `env.kwargs` set is not normalised.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Reference:
    random: float
    high: float


REFERENCE: dict[str, Reference] = {
    "CartPole-v1": Reference(random=22.4, high=500.0),
    "gymnasium:CartPole-v1": Reference(random=22.4, high=500.0),
    "Acrobot-v1": Reference(random=-499.0, high=-100.0),
    "MountainCar-v0": Reference(random=-200.0, high=-110.0),
    "Pendulum-v1": Reference(random=-1228.0, high=0.0),
    "Catch-bsuite": Reference(random=-0.59, high=1.0),
}


def reference(env_name: str, kwargs: dict | None = None) -> Reference | None:
    """The env's reference returns, or None (not in the table, or changed by kwargs)."""
    return None if kwargs else REFERENCE.get(env_name)
