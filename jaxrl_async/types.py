"""The types an algorithm sees: the Agent it returns and everything the pipeline hands it.

An algorithm is an `Agent` of pure functions (optax-style). On-policy agents learn from a
`Transition` trajectory [T, B, ...]; off-policy agents from a replay `Sample` of
`NStepTransition` items. The actor gets an `ActorClock`; the factory a `BuildContext`.
A recurrent agent's per-env state between steps travels as a `Memory`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

Params = Any
# A state record's array field. The same record also describes its layout: a field then
# holds the array's PartitionSpec (how it is split over the mesh) or ShapeDtypeStruct.
Leaf = Any
LearnerState = Any  # any pytree with a `.params` field, the parameters the actor uses
Metrics = dict[str, jax.Array]
Observation = Any  # a batch of observations [B, ...]: an array, or a dict of arrays
# A recurrent agent's per-env state between steps, a pytree [B, ...] (`Agent.init_carry`);
# None for a memoryless agent
Carry = Any
# What `Agent.learn` learns from: a Transition trajectory [T, B, ...] (data="trajectory")
# or a replay Sample (data="replay")
LearnData = Any


class Agent(NamedTuple):
    """An algorithm as pure functions, built by `make_<algo>(config, ctx)`. Every agent has
    the same signatures, recurrent or memoryless, on-policy or off-policy:

    init:  (key) -> learner_state
    act:   (params, carry [B, ...], obs [B, ...], episode_start bool [B], keys [B], clock)
             -> ActOutput(carry, action [B, ...], extras dict of [B] arrays); one key per
             env, so that sampling does not depend on how the batch is split; `clock`
             (ActorClock) says how far training is and which envs these are. A recurrent
             agent resets its carry to `init_carry` where `episode_start` before it reads
             the observation; a memoryless agent is handed None for carry and
             episode_start and returns its carry as given (None)
    learn: (learner_state, data, key) -> LearnOutput(learner_state, metrics, priorities);
             on-policy ("trajectory"): data is a Transition trajectory [T, B, ...] and
             priorities None; off-policy ("replay"): data is a Sample of [batch, ...]
             NStepTransition items and priorities [batch] the new priority of every
             sampled item (|TD error|), which uniform replay ignores
    data:  "trajectory" (the pipeline's double buffer) or "replay"
    replay: for data="replay", how the pipeline feeds the learner (ReplayUse)
    greedy: (params, carry, obs, episode_start) -> GreedyOutput(carry, action [B, ...]),
            the deterministic action for evaluation (the mode of the policy, the argmax
            of Q), the carry as `act`'s; None if there is none
    init_carry: recurrent agents only: (batch) -> carry [batch, ...], the carry at an
            episode's start. None: the agent is memoryless, its carry is None
    targets: on-policy agents whose learn first turns the trajectory into a batch with
            return targets and then takes gradient steps on it (PPO):
            (learner_state, trajectory) -> that batch. Only `jaxrl-async bench --profile`
            calls it, to time the return computation apart from the update; None where the
            targets are computed inside the loss (IMPALA's V-trace) or at storage

    Under the data-parallel pipeline, act and learn run per device on a slice of the
    env batch; learn must average over the whole batch with `lax.pmean(…, axis_name)`
    (`ctx.axis_name`; None on one device, where there is nothing to average)
    (differentiate the pmean'd loss: the gradient of a per-device loss with respect to
    replicated parameters comes back summed over devices, not averaged) and return a
    learner state and metrics that are the same on every device.
    """

    init: InitFn
    act: ActFn
    learn: LearnFn
    data: str = "trajectory"
    replay: ReplayUse | None = None
    greedy: GreedyFn | None = None
    init_carry: InitCarryFn | None = None
    targets: TargetsFn | None = None

    @property
    def recurrent(self) -> bool:
        return self.init_carry is not None

    def initial_memory(self, batch: int) -> Memory | None:
        """Every env at an episode's start (None for a memoryless agent)."""
        if self.init_carry is None:  # memoryless (not `recurrent`)
            return None
        return Memory(self.init_carry(batch), jnp.ones((batch,), bool))


class ActOutput(NamedTuple):
    """What `Agent.act` returns for a batch of envs [B, ...]."""

    carry: Carry  # the carry after this step (a memoryless agent's: None, as given)
    action: jax.Array
    extras: dict[str, jax.Array]  # what the trajectory records (log-probabilities, ...)


class GreedyOutput(NamedTuple):
    """What `Agent.greedy` returns for a batch of envs [B, ...]."""

    carry: Carry  # as ActOutput's
    action: jax.Array


class LearnOutput(NamedTuple):
    """What `Agent.learn` returns."""

    state: LearnerState
    metrics: Metrics  # scalars, the same on every device
    # off-policy: the new priority of every sampled item [batch]; on-policy: None
    priorities: jax.Array | None = None


class Memory(NamedTuple):
    """What a recurrent actor carries from one step to the next, per env [B, ...].

    In `PipelineState.memory` it is what each env's next step starts from; in a
    `Transition` trajectory [T, B] what the actor held before acting at step t, the
    carry as it was before the agent's reset at an episode start (the learner repeats
    that reset when it re-runs the sequence from a stored carry)."""

    carry: Carry  # the agent's carry pytree (Agent.init_carry)
    episode_start: jax.Array  # bool: the env's current observation begins an episode


class ReplayUse(NamedTuple):
    """What an off-policy agent asks of the pipeline's replay stage."""

    n_step: int = 1  # transitions stored as n-step returns (offpolicy.nstep_transitions)
    gamma: float = 0.99  # the discount of those returns
    updates_per_tick: int = 1  # learner updates (sampled batches) per tick
    # > 0: the replay stores sequences of this many steps with their first carry instead of
    # n-step transitions (replay/sequences.py, R2D2); consecutive ones overlap by
    # `sequence_overlap` steps
    sequence_length: int = 0
    sequence_overlap: int = 0


class ActorClock(NamedTuple):
    """Where the actor is: for schedules (epsilon) and per-env exploration (Ape-X)."""

    env_steps: jax.Array  # int32 [] env steps of all envs taken before this step
    env_index: jax.Array  # int32 [B] the global index of each env in the batch
    num_envs: int  # the global batch


class BuildContext(NamedTuple):
    """What an agent factory needs to know about the run besides its own config."""

    spec: Any  # envs.EnvSpec: observation and action shapes, dtypes and bounds
    num_envs: int  # the global batch, over all devices
    rollout_len: int
    num_updates: int
    # mesh axis the batch is split over, for lax.pmean; None on one device (nothing to
    # average, and no collective compiled)
    axis_name: str | None = None


class Transition(NamedTuple):
    """One env step of every env; a trajectory stacks them time-major [T, B, ...]."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array  # stops bootstrapping
    truncated: jax.Array  # ends the episode, bootstraps from next_obs
    next_obs: jax.Array  # the observation after the step, before any auto-reset
    extras: dict  # what the actor recorded (log-probabilities, raw actions, ...)
    version: jax.Array  # int32: the learner update count of the parameters that acted
    memory: Memory | None = None  # recurrent agents: the actor's carry before this step


class NStepTransition(NamedTuple):
    """What the replay stores: target = reward + discount · V(next_obs)."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array  # float32: Σ_k γ^k r_{t+k} up to n steps or the episode's end
    discount: jax.Array  # float32: γ^(k+1) after k+1 steps, 0 at a termination
    next_obs: jax.Array  # the observation to bootstrap from (a truncation's final one)


class Sample(NamedTuple):
    """A batch drawn from the replay. Uniform and prioritized replay return the same
    fields, so an agent can take either: for a uniform sample every probability is
    1/size and every importance weight is 1."""

    items: Any  # pytree of [batch, ...] (NStepTransition in the pipeline)
    indices: jax.Array  # int32 [batch] the slots drawn, for `update_priorities`
    probabilities: jax.Array  # float32 [batch] the probability of each draw
    weights: jax.Array  # float32 [batch] importance weights, at most 1


# The signatures of an Agent's functions (see `Agent`).
InitFn = Callable[[jax.Array], LearnerState]
# (params, carry, obs, episode_start [B] or None, keys [B], clock) -> (carry, action, extras)
ActFn = Callable[[Params, Carry, Observation, jax.Array | None, jax.Array, ActorClock], ActOutput]
# (params, carry, obs, episode_start [B] or None) -> (carry, action)
GreedyFn = Callable[[Params, Carry, Observation, jax.Array | None], GreedyOutput]
# (learner_state, data, key) -> (learner_state, metrics, priorities or None)
LearnFn = Callable[[LearnerState, LearnData, jax.Array], LearnOutput]
InitCarryFn = Callable[[int], Carry]  # (batch) -> the carry of `batch` envs at episode starts
TargetsFn = Callable[[LearnerState, Transition], Any]  # (learner_state, trajectory) -> batch
