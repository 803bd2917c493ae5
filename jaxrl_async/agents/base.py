"""The interface through which an algorithm plugs into the shared pipeline."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax

from jaxrl_async.envs.spec import EnvSpec
from jaxrl_async.errors import require
from jaxrl_async.networks import ACTIVATIONS

Params = Any
LearnerState = Any  # any pytree with a `.params` field, the parameters the actor uses
Metrics = dict[str, jax.Array]


class Agent(NamedTuple):
    """An algorithm as pure functions (optax-style), built by `make_<algo>(config, spec, ...)`.

    init:  (key) -> learner_state
    act:   (params, obs [B, ...], keys [B], clock) -> (action [B, ...], extras dict of [B]
           arrays); one key per env, so that sampling does not depend on how the batch is
           split; `clock` (ActorClock) says how far training is and which envs these are
    learn: on-policy ("trajectory"):
             (learner_state, trajectory [T, B, ...], key) -> (learner_state, metrics)
           off-policy ("replay"):
             (learner_state, sample: replay Sample of [batch, ...] NStepTransition items,
              key) -> (learner_state, metrics, priorities [batch]), the new priority of
              every sampled item (|TD error|); uniform replay ignores them
    data:  "trajectory" (the pipeline's double buffer) or "replay"
    replay: for data="replay", how the pipeline feeds the learner (ReplayUse)
    greedy: (params, obs [B, ...]) -> action [B, ...], the deterministic action for
            evaluation (the mode of the policy, the argmax of Q); None if there is none

    Under the data-parallel pipeline, act and learn run per device on a slice of the
    env batch; learn must average over the whole batch with `lax.pmean(…, axis_name)`
    (differentiate the pmean'd loss: the gradient of a per-device loss with respect to
    replicated parameters comes back summed over devices, not averaged) and return a
    learner state and metrics that are the same on every device.
    """

    init: Callable[[jax.Array], LearnerState]
    act: Callable[[Params, jax.Array, jax.Array], tuple[jax.Array, dict]]
    learn: Callable[..., tuple]
    data: str = "trajectory"
    replay: ReplayUse | None = None
    greedy: Callable[[Params, jax.Array], jax.Array] | None = None


class ReplayUse(NamedTuple):
    """What an off-policy agent asks of the pipeline's replay stage."""

    n_step: int = 1  # transitions stored as n-step returns (offpolicy.nstep_transitions)
    gamma: float = 0.99  # the discount of those returns
    updates_per_tick: int = 1  # learner updates (sampled batches) per tick


class ActorClock(NamedTuple):
    """Where the actor is: for schedules (epsilon) and per-env exploration (Ape-X)."""

    env_steps: jax.Array  # int32 [] env steps of all envs taken before this rollout
    env_index: jax.Array  # int32 [B] the global index of each env in the batch
    num_envs: int  # the global batch


class BuildContext(NamedTuple):
    """What an agent factory needs to know about the run besides its own config."""

    spec: EnvSpec
    num_envs: int  # the global batch, over all devices
    rollout_len: int
    num_updates: int
    axis_name: str | None = None  # mesh axis the batch is split over, for lax.pmean


def field_checks(config, section: str = "agent"):
    """need(ok, key, requirement): a ConfigError naming `section.key` and its value unless
    ok; and the checks every agent's network fields share, already run."""

    def need(ok, key, requirement):
        require(ok, f"{section}.{key}", getattr(config, key), requirement)

    need(len(config.hidden_sizes) >= 1 and min(config.hidden_sizes) >= 1,
         "hidden_sizes", "a non-empty list of positive ints")
    need(config.activation in ACTIVATIONS, "activation", f"one of {sorted(ACTIVATIONS)}")
    return need
