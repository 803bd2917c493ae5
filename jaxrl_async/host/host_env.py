"""What an actor sees of a host env (one stepped on the host in numpy, not inside the
training program): `HostEnv`, the adapter's interface, and `HostStep`, one step of it.

Every adapter (`gymnasium_env.py`, Atari's in `atari.py`, `envpool_env.py`) returns the same
`HostStep`, with the episode semantics of the JAX suites whatever its autoreset mode: a step is a
transition where `valid`; `terminated` stops bootstrapping, `truncated` bootstraps from
`final_obs`; returns and lengths are the env's own, undiscounted.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import numpy as np

from jaxrl_async.envs.spec import EnvSpec


class HostStep(NamedTuple):
    """One step of B envs, every field batched [B, ...] in numpy.

    obs: what each env acts from next (after a reset, where one happened within the step).
    reward: float32, the env's own (0 where not `valid`).
    terminated, truncated: bool, as the env gives them (a time limit is not a termination).
    final_obs: the observation this step's action led to, before any reset: the one to
        bootstrap a truncation from. Equal to `obs` where no episode ended within the step.
    valid: False where the step was no transition: under next-step autoreset, the step
        after an episode ended only reset that env and ignored its action.
    episode_return: float64, the undiscounted sum of the env's rewards over the episode
        that ended at this step (a raw score); 0 where none ended.
    episode_length: int64, that episode's valid steps; 0 where none ended.
    episode_done: bool, where the episode reported in `episode_return` ended: where
        `terminated` or `truncated`, except that under Atari's episodic lives a life lost
        terminates the agent's episode but not the game, which is the episode reported.
    """

    obs: Any
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: Any
    valid: np.ndarray
    episode_return: np.ndarray
    episode_length: np.ndarray
    episode_done: np.ndarray

    @property
    def done(self) -> np.ndarray:
        """Where a reported episode ended at this step (`episode_done`; terminated or
        truncated but for a life lost under episodic lives)."""
        return self.episode_done


class HostEnv(Protocol):
    """B copies of an env stepped on the host; observations and actions as `spec` says."""

    name: str
    num_envs: int
    spec: EnvSpec

    def reset(self, seed: int) -> Any:
        """Reset every env (env i from `seed` + i); the first observations [B, ...]."""
        ...

    def step(self, actions: np.ndarray) -> HostStep:
        """Step every env with `actions` [B, ...] of the spec's dtype."""
        ...

    def close(self) -> None: ...
