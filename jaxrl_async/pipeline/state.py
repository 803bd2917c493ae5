"""What a pipeline is made of: its shape, the numbers fixed when it is built, and its
state, the pytree every tick carries from one to the next.

Shape-setting numbers are Python ints (they size arrays and loops, so a new value is a
new program); anything that changes in training lives in the state.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flax import struct
from jax.sharding import PartitionSpec as P

from jaxrl_async.pipeline.sharding import AXIS
from jaxrl_async.types import Leaf


@dataclasses.dataclass(frozen=True)
class PipelineShape:
    """The numbers that set a pipeline's programs (`make_pipeline`)."""

    rollout_len: int  # T: the steps each env takes per tick
    num_envs: int  # B: the envs over all devices
    unroll: int = 1  # the rollout scan's unroll
    lag: int = 0  # the actor's parameter lag in learner updates (ticks.py)
    # >= 0: skip (mask) a learner update on data that parameters more than this many
    # updates old produced; -1: never skip
    max_staleness: int = -1
    total_steps: int = 1  # the run's env steps (off-policy: importance-weight annealing)

    @property
    def tick_steps(self) -> int:
        """Env steps of all envs in one tick."""
        return self.rollout_len * self.num_envs


class PipelineState(struct.PyTreeNode):
    learner: Any
    env_state: Any  # [B, ...] per env (split over the mesh)
    obs: Leaf  # [B, ...] the observation each env shows now
    key: Leaf
    updates: Leaf  # learner updates done so far: the learner's parameter version
    env_steps: Leaf  # int32 env steps of all envs in ticks so far (prefills not counted)
    # recurrent agents only (None otherwise): Memory [B, ...], each env's carry and whether
    # its current observation starts an episode; split over the mesh with the envs
    memory: Any = None
    # lag >= 1 only (None otherwise): a ParamQueue
    actor_queue: Any = None
    # on-policy agents at lag >= 1 only (None otherwise):
    in_flight: Any = None  # Transition [T, B, ...] written last tick, learned on this tick
    in_flight_version: Any = None  # the parameter version that wrote it
    # off-policy agents only (None otherwise):
    replay: Any = None  # [D, ...] one replay per device (replay/stage.py), split over the mesh
    window: Any = None  # Transition [T + n - 1, B, ...] the steps the next tick stores


def state_specs(env, lag: int, offpolicy: bool, recurrent: bool = False) -> PipelineState:
    """How each field of a PipelineState is split over the mesh (None: absent)."""
    double_buffered = lag > 0 and not offpolicy
    return PipelineState(
        learner=P(),
        env_state=env.partition_spec(AXIS),
        obs=P(AXIS),
        key=P(),
        updates=P(),
        env_steps=P(),
        memory=P(AXIS) if recurrent else None,
        actor_queue=P() if lag else None,
        in_flight=P(None, AXIS) if double_buffered else None,
        in_flight_version=P() if double_buffered else None,
        replay=P(AXIS) if offpolicy else None,
        window=P(None, AXIS) if offpolicy else None,
    )
