"""The replay half of the tick: n-step transitions into replay, sampled batches out.

An off-policy agent (`Agent.data == "replay"`) plugs into the same tick as the
on-policy ones; only what sits between the actor and the learner changes:

    store: the actor's trajectory [T, B] -> n-step transitions -> replay.add
    learn: U times: sample a batch -> agent.learn -> write the new priorities back

The learner runs before this tick's store, so it samples the replay as it stood at
the end of the previous tick and the actor and learner share no data in a tick.

n-step windows cross rollout boundaries: the last n-1 steps of each rollout wait in
a `tail` until the next rollout completes their windows, so every env step is
stored exactly once, as the start of one n-step transition.

Over D devices each device keeps its own replay of capacity/D holding its own envs'
transitions and draws batch/D items a step; the prioritized sampler reports each
draw's probability over the union of the shards, so importance weights stay exact.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_async.agents.base import ReplayUse
from jaxrl_async.replay import prioritized, ring
from jaxrl_async.returns import nstep_returns


class NStepTransition(NamedTuple):
    """What the replay stores: target = reward + discount · V(next_obs)."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array  # float32: Σ_k γ^k r_{t+k} up to n steps or the episode's end
    discount: jax.Array  # float32: γ^(k+1) after k+1 steps, 0 at a termination
    next_obs: jax.Array  # the observation to bootstrap from (a truncation's final one)


def nstep_transitions(window, n: int, gamma: float) -> NStepTransition:
    """The n-step transitions starting at each of the first T steps of `window`
    (a pipeline Transition [T + n - 1, B, ...]), [T, B, ...]."""
    returns, discounts, offsets = nstep_returns(window.reward, window.terminated,
                                                window.truncated, n, gamma)
    T = returns.shape[0]
    index = jnp.arange(T)[:, None] + offsets  # [T, B] the step to bootstrap after
    next_obs = jnp.take_along_axis(
        window.next_obs, index.reshape(*index.shape, *([1] * (window.next_obs.ndim - 2))),
        axis=0)
    return NStepTransition(window.obs[:T], window.action[:T], returns, discounts,
                           next_obs.astype(window.obs.dtype))


class ReplayStage(NamedTuple):
    """Pure functions over one device's replay (no leading device axis).

    init:  example NStepTransition (no batch axis) -> replay state
    store: (replay, tail, trajectory [T, B]) -> (replay, tail); tail is the last n-1
           steps (None when n == 1)
    learn: (agent_learn, learner, replay, env_steps, key) ->
           (learner, replay, metrics, learned: bool [])
    """

    init: Callable
    store: Callable
    learn: Callable
    n_step: int


def make_replay_stage(use: ReplayUse, config: Any, num_devices: int, total_steps: int,
                      axis_name: str | None = None) -> ReplayStage:
    """`config` is a ReplayConfig; capacity and batch are over all `num_devices` devices."""
    capacity = config.capacity // num_devices
    batch = config.batch_size // num_devices
    n = use.n_step
    is_prioritized = config.kind == "prioritized"

    def init(example):
        if is_prioritized:
            return prioritized.init(capacity, example, alpha=config.alpha)
        return ring.init(capacity, example)

    def store(replay, tail, traj):
        window = traj if n == 1 else jax.tree.map(
            lambda a, b: jnp.concatenate([a, b]), tail, traj)
        items = nstep_transitions(window, n, use.gamma)
        items = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), items)  # [T * B] time-major
        replay = (prioritized.add(replay, items) if is_prioritized else ring.add(replay, items))
        tail = None if n == 1 else jax.tree.map(lambda x: x[x.shape[0] - (n - 1):], window)
        return replay, tail

    def sample(replay, key, beta):
        if is_prioritized:
            return prioritized.sample(replay, key, batch, beta, axis_name=axis_name)
        if axis_name is not None:
            key = jax.random.fold_in(key, jax.lax.axis_index(axis_name))
        return ring.sample(replay, key, batch)

    def learn(agent_learn, learner, replay, env_steps, key):
        progress = jnp.minimum(env_steps.astype(jnp.float32) / total_steps, 1.0)
        beta = config.beta + (1.0 - config.beta) * progress

        def updates(operand):
            def one(carry, update_key):
                learner, replay = carry
                sample_key, learn_key = jax.random.split(update_key)
                drawn = sample(replay, sample_key, beta)
                learner, metrics, priorities = agent_learn(learner, drawn, learn_key)
                if is_prioritized:
                    replay = prioritized.update_priorities(
                        replay, drawn.indices, jnp.abs(priorities) + config.priority_eps,
                        axis_name=axis_name)
                    # The shared maximum comes back device-invariant; the shard's state is not.
                    replay = replay.replace(max_priority=_varying(replay.max_priority, axis_name))
                return (learner, replay), metrics

            (learner, replay), metrics = jax.lax.scan(
                one, operand, jax.random.split(key, use.updates_per_tick))
            metrics = jax.tree.map(jnp.mean, metrics)
            return learner, replay, {**metrics, "replay_beta": beta}

        # Learn once the replay holds `learning_starts` steps and at least one tick's worth.
        # env_steps is replicated, so every device takes the same branch.
        learned = env_steps >= max(config.learning_starts, 1)
        metric_shapes = jax.eval_shape(updates, (learner, replay))[2]

        def wait(operand):
            zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metric_shapes)
            return (*operand, zeros)

        learner, replay, metrics = jax.lax.cond(learned, updates, wait, (learner, replay))
        return learner, replay, metrics, learned

    return ReplayStage(init=init, store=store, learn=learn, n_step=n)


def _varying(x, axis_name):
    if axis_name is None:
        return x
    try:
        return jax.lax.pcast(x, (axis_name,), to="varying")
    except ValueError:  # already varying
        return x
