"""The tick: act in every env for a rollout, learn, as one XLA program.

`tick(state) -> (state, metrics)` is scanned K times per host call (`make_chunk`);
the host compiles that chunk once (state donated) and calls it until the run is done.
Everything here is a pure function of a PipelineState pytree. A tick has two halves:

- the actor (`make_act`): one rollout with the parameters in front of the parameter
  queue, advancing the env step clock;
- the learner (`make_learn` or `make_replay_learn`): one update, on a trajectory or on
  samples of the replay.

`lag` sets how the halves meet, one tick builder each:
- `make_sync_tick`, lag 0: the actor rolls out with the learner's parameters and the
  learner updates on that trajectory in the same tick.
- `make_async_tick`, lag L >= 1: double-buffered. The learner updates on the
  trajectory the actor wrote in the previous tick (`in_flight`) while the actor rolls
  out the next one with the oldest of the last L parameter versions (`ParamQueue`).
  Inside a tick the halves share no data, so XLA (or two device groups, split.py) may
  run them at once; after the first L ticks the data the learner consumes is exactly
  L updates old. Split placement runs this same `async_tick` with its halves compiled
  on two meshes, so the two placements cannot drift apart.
- `make_replay_tick`, off-policy agents: the replay (replay/stage.py) sits between actor
  and learner; the learner samples it as the previous tick left it, and at lag L the
  actor acts with the parameters of L updates ago.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from jaxrl_async.pipeline.param_queue import queue_oldest, queue_push
from jaxrl_async.pipeline.rollout import RolloutStart
from jaxrl_async.pipeline.sharding import AXIS
from jaxrl_async.pipeline.state import PipelineState
from jaxrl_async.run.divergence import param_abs_max
from jaxrl_async.types import Agent, Leaf, LearnFn, LearnOutput, Sample


class ActorState(NamedTuple):
    """The fields of a PipelineState that the actor's half reads and moves on."""

    env_state: Any  # [B, ...]
    obs: Leaf  # [B, ...]
    memory: Any  # Memory [B, ...] (None: a memoryless agent)
    key: Leaf  # the run's key
    env_steps: Leaf


def actor_state(state) -> ActorState:
    """The actor's fields of `state` (a PipelineState, or an Acted)."""
    return ActorState(state.env_state, state.obs, state.memory, state.key, state.env_steps)


class Acted(NamedTuple):
    """The actor's half of a tick: the envs moved on, a trajectory and its statistics."""

    env_state: Any
    obs: Leaf
    memory: Any  # Memory [B, ...] (None: a memoryless agent)
    key: Leaf  # the run's key for the next tick
    env_steps: Leaf
    traj: Any  # Transition [T, B, ...]
    version: Leaf  # the parameter version that acted
    stats: Any  # dict: episode statistics of the rollout, summed over the mesh
    learn_key: Leaf  # this tick's key for the learner


def make_act(rollout: Callable, tick_steps: int) -> Callable:
    """act(params, version, actor: ActorState) -> Acted: one rollout with `params` of
    `version`."""

    def act(params, version, actor: ActorState) -> Acted:
        key, rollout_key, learn_key = jax.random.split(actor.key, 3)
        env_state, obs, memory, traj, stats = rollout(
            params,
            actor.env_state,
            actor.obs,
            actor.memory,
            rollout_key,
            RolloutStart(version, actor.env_steps),
        )
        return Acted(
            env_state,
            obs,
            memory,
            key,
            actor.env_steps + tick_steps,
            traj,
            version,
            stats,
            learn_key,
        )

    return act


def acted_fields(acted: Acted) -> dict:
    """The PipelineState fields the actor's half moves on (for `state.replace`)."""
    return actor_state(acted)._asdict()


def lag_metrics(staleness) -> dict:
    staleness = staleness.astype(jnp.float32)
    return {"policy_lag": staleness, "policy_lag_max": staleness}


def make_learn(agent: Agent, max_staleness: int) -> Callable:
    """learn(learner, updates, traj, version, key) -> (learner, updates, metrics): the
    agent's update on a trajectory, masked when its data is more than `max_staleness`
    updates old (-1: never)."""

    def learn(learner_state, updates, traj, version, key):
        staleness = updates - version
        learned = agent.learn(learner_state, traj, key)  # on-policy: no priorities
        learner, metrics = learned.state, learned.metrics
        updated = jnp.bool_(True) if max_staleness < 0 else staleness <= max_staleness
        if max_staleness >= 0:
            learner = jax.tree.map(
                lambda new, old: jnp.where(updated, new, old), learner, learner_state
            )
        metrics = {
            **metrics,
            **lag_metrics(staleness),
            "skipped_updates": 1.0 - updated.astype(jnp.float32),
        }
        return learner, updates + updated.astype(jnp.int32), metrics

    return learn


class ReplayInputs(NamedTuple):
    """What the replay learner takes from the actor's side of a tick (replicated)."""

    env_steps: Leaf  # env steps before this tick (learning starts, annealing)
    version: Leaf  # the parameter version that acted this tick
    obs_stats: Any  # the env's observation statistics (None: not normalised)
    key: Leaf  # this tick's key for the learner


def learn_seen(agent_learn: LearnFn, observe: Callable, obs_stats: Any) -> LearnFn:
    """`agent_learn` on sampled batches of raw observations: each batch's `obs` and
    `next_obs` turned into what the agent sees by `observe(obs_stats, obs)` first (the
    statistics current when it is drawn). The host executor's replay learner uses it too."""

    def learn(learner, sample: Sample, key: jax.Array) -> LearnOutput:
        items = sample.items._replace(
            obs=observe(obs_stats, sample.items.obs),
            next_obs=observe(obs_stats, sample.items.next_obs),
        )
        return agent_learn(learner, sample._replace(items=items), key)

    return learn


def make_replay_learn(stage, agent_learn: LearnFn, observe: Callable) -> Callable:
    """learn(learner, updates, replay, window, given: ReplayInputs) -> (learner, updates,
    replay, metrics): store the window's steps, then learn from the replay (replay/stage.py).

    The replay holds raw observations; `observe(obs_stats, obs)` turns each sampled
    batch into what the agent sees, under the env's current observation statistics
    (`learn_seen`)."""

    def learn(learner, updates, replay, window, given: ReplayInputs):
        # The replay keeps its leading device axis (of 1 here) from the state in to the
        # state out: the store is vmapped over it and the update drops it only where it
        # reads the buffer. Squeezed here and re-stacked on the way out, the stored
        # buffer reached the learner and the state as two differently shaped views, and
        # XLA updated each view separately, copying every replay array about three
        # times a tick (SAC, 1e5 slots: 2.3x slower).
        replay = jax.vmap(stage.store, in_axes=(0, None))(replay, window)
        learner, replay, metrics, learned = stage.learn(
            learn_seen(agent_learn, observe, given.obs_stats),
            learner,
            replay,
            given.env_steps,
            given.key,
            stacked=True,
        )
        metrics = {
            **metrics,
            **lag_metrics(updates - given.version),
            "learning": learned.astype(jnp.float32),
        }
        return learner, updates + learned.astype(jnp.int32), replay, metrics

    return learn


def _same(x, spec=None):
    return x


class Halves(NamedTuple):
    """The parts a lagged tick is made of. Fused placement: plain functions, all in one
    program. Split placement (split.py): each compiled on its own group of devices, and
    `to_actor(x)` / `to_learner(x, spec)` move values between the groups (the identity
    inside one program)."""

    act: Callable  # make_act's
    learn: Callable  # make_learn's, or make_replay_learn's off-policy
    push: Callable = queue_push
    oldest: Callable = queue_oldest
    to_actor: Callable = _same
    to_learner: Callable = _same
    advance: Callable | None = None  # off-policy: (window, trajectory) -> the next window
    obs_stats: Callable | None = None  # off-policy: env_state -> observation statistics


def make_sync_tick(act: Callable, learn: Callable) -> Callable:
    """Lag 0: roll out with the learner's parameters, then learn on that trajectory."""

    def tick(state: PipelineState):
        acted = act(state.learner.params, state.updates, actor_state(state))
        learner, updates, metrics = learn(
            state.learner, state.updates, acted.traj, acted.version, acted.learn_key
        )
        state = state.replace(learner=learner, updates=updates, **acted_fields(acted))
        return state, {**metrics, **acted.stats}

    return tick


def async_tick(state: PipelineState, halves: Halves):
    """One double-buffered tick. The actor rolls out with the queue's oldest parameters
    while the learner updates on last tick's trajectory; nothing the actor does reads
    the learner's output. Split placement calls this function with its halves compiled
    separately."""
    to_actor, to_learner = halves.to_actor, halves.to_learner
    params, version = halves.oldest(state.actor_queue)
    acted = halves.act(params, version, actor_state(state))
    learner, updates, metrics = halves.learn(
        state.learner,
        state.updates,
        state.in_flight,
        state.in_flight_version,
        to_learner(acted.learn_key, P()),
    )
    queue = halves.push(state.actor_queue, to_actor(learner.params), to_actor(updates))
    state = state.replace(
        learner=learner,
        updates=updates,
        **acted_fields(acted),
        actor_queue=queue,
        in_flight=to_learner(acted.traj, P(None, AXIS)),
        in_flight_version=to_learner(acted.version, P()),
    )
    return state, {**metrics, **acted.stats}


def make_async_tick(act: Callable, learn: Callable) -> Callable:
    """Lag >= 1 in one program (fused placement)."""
    return functools.partial(async_tick, halves=Halves(act, learn))


def replay_tick(state: PipelineState, halves: Halves):
    """One off-policy tick: the actor rolls out while the learner stores last tick's
    steps and learns from the replay; the two share nothing. At lag L the actor acts
    with the parameters of L updates ago (the replay already decouples the learner
    from the newest data)."""
    to_actor, to_learner = halves.to_actor, halves.to_learner
    advance, obs_stats = halves.advance, halves.obs_stats
    assert advance is not None and obs_stats is not None  # make_replay_tick's halves
    queue = state.actor_queue
    params, version = (
        (state.learner.params, state.updates)
        if queue is None  # lag 0
        else halves.oldest(queue)
    )
    acted = halves.act(params, version, actor_state(state))
    if queue is not None:  # the parameters this tick started from join the queue
        queue = halves.push(queue, to_actor(state.learner.params), to_actor(state.updates))
    given = ReplayInputs(
        to_learner(state.env_steps, P()),
        to_learner(version, P()),
        to_learner(obs_stats(state.env_state), P()),
        to_learner(acted.learn_key, P()),
    )
    learner, updates, replay, metrics = halves.learn(
        state.learner, state.updates, state.replay, state.window, given
    )
    state = state.replace(
        learner=learner,
        updates=updates,
        **acted_fields(acted),
        actor_queue=queue,
        replay=replay,
        window=advance(state.window, to_learner(acted.traj, P(None, AXIS))),
    )
    return state, {**metrics, **acted.stats}


def make_replay_tick(
    act: Callable, learn: Callable, advance: Callable, obs_stats: Callable
) -> Callable:
    """Off-policy agents in one program (fused placement), any lag."""
    return functools.partial(
        replay_tick, halves=Halves(act, learn, advance=advance, obs_stats=obs_stats)
    )


def make_chunk(tick, num_ticks: int):
    """K ticks in one program; metrics come back stacked [K], each tick's with the
    learner's `param_abs_max` for the host's divergence check (run/divergence.py)."""

    def checked_tick(state, _):
        state, metrics = tick(state)
        return state, {**metrics, "param_abs_max": param_abs_max(state.learner.params)}

    def chunk(state):
        return jax.lax.scan(checked_tick, state, None, length=num_ticks)

    return chunk
