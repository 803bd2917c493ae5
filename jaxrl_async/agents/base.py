"""The interface through which an algorithm plugs into the shared pipeline."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax

from jaxrl_async.envs.spec import EnvSpec

Params = Any
LearnerState = Any  # any pytree with a `.params` field, the parameters the actor uses
Metrics = dict[str, jax.Array]


class Agent(NamedTuple):
    """An algorithm as pure functions (optax-style), built by `make_<algo>(config, spec, ...)`.

    init:  (key) -> learner_state
    act:   (params, obs [B, ...], key) -> (action [B, ...], extras dict of [B] arrays)
    learn: (learner_state, trajectory [T, B, ...], key) -> (learner_state, metrics)
    data:  "trajectory" (on-policy ring) or "replay"
    """

    init: Callable[[jax.Array], LearnerState]
    act: Callable[[Params, jax.Array, jax.Array], tuple[jax.Array, dict]]
    learn: Callable[[LearnerState, Any, jax.Array], tuple[LearnerState, Metrics]]
    data: str = "trajectory"


class BuildContext(NamedTuple):
    """What an agent factory needs to know about the run besides its own config."""

    spec: EnvSpec
    num_envs: int
    rollout_len: int
    num_updates: int
