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
    act:   (params, obs [B, ...], keys [B]) -> (action [B, ...], extras dict of [B] arrays);
           one key per env, so that sampling does not depend on how the batch is split
    learn: (learner_state, trajectory [T, B, ...], key) -> (learner_state, metrics)
    data:  "trajectory" (on-policy ring) or "replay"

    Under the data-parallel pipeline, act and learn run per device on a slice of the
    env batch; learn must average over the whole batch with `lax.pmean(…, axis_name)`
    (differentiate the pmean'd loss: the gradient of a per-device loss with respect to
    replicated parameters comes back summed over devices, not averaged) and return a
    learner state and metrics that are the same on every device.
    """

    init: Callable[[jax.Array], LearnerState]
    act: Callable[[Params, jax.Array, jax.Array], tuple[jax.Array, dict]]
    learn: Callable[[LearnerState, Any, jax.Array], tuple[LearnerState, Metrics]]
    data: str = "trajectory"


class BuildContext(NamedTuple):
    """What an agent factory needs to know about the run besides its own config."""

    spec: EnvSpec
    num_envs: int  # the global batch, over all devices
    rollout_len: int
    num_updates: int
    axis_name: str | None = None  # mesh axis the batch is split over, for lax.pmean
