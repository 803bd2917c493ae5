"""The replay half of the tick: n-step transitions into replay, sampled batches out.

An off-policy agent (`Agent.data == "replay"`) plugs into the same tick as the
on-policy ones; only what sits between the actor and the learner changes:

    store: the pending window [T + n - 1, B] -> T x B n-step transitions -> replay.add
    learn: U times: sample a batch -> agent.learn -> write the new priorities back
    (meanwhile the actor rolls out T more steps, which join the window for next tick)

The window holds the previous tick's trajectory behind the last n-1 steps of the one
before, so the learner samples the replay as it stood at the end of the previous tick
and the actor and learner share no data in a tick. Storing first, then only reading,
lets XLA write the replay in place: learning first and storing after made it copy the
whole buffer every tick, a cost that grows with the capacity. Every env step is stored
exactly once, as the start of one n-step transition, windows crossing rollouts.

A recurrent agent that asks for sequences (`ReplayUse.sequence_length`, R2D2) gets
fixed-length sequences with their stored carries instead (replay/sequences.py): the
window then carries the last L - stride steps over, stride = L - overlap must divide T,
and each tick stores T / stride sequences of every env.

Over D devices each device keeps its own replay of capacity/D holding its own envs'
transitions and draws batch/D items a step; the prioritized sampler reports each
draw's probability over the union of the shards, so importance weights stay exact.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_async.agents.returns import nstep_returns
from jaxrl_async.replay import prioritized, ring
from jaxrl_async.replay.sequences import sequence_starts, window_sequences
from jaxrl_async.types import LearnFn, NStepTransition, ReplayUse


def nstep_transitions(window, n: int, gamma: float) -> NStepTransition:
    """The n-step transitions starting at each of the first T steps of `window`
    (a pipeline Transition [T + n - 1, B, ...]), [T, B, ...]."""
    returns, discounts, offsets = nstep_returns(
        window.reward, window.terminated, window.truncated, n, gamma
    )
    T = returns.shape[0]
    index = jnp.arange(T)[:, None] + offsets  # [T, B] the step to bootstrap after

    def bootstrap(next_obs, obs):
        at = index.reshape(*index.shape, *([1] * (next_obs.ndim - 2)))
        return jnp.take_along_axis(next_obs, at, axis=0).astype(obs.dtype)

    return NStepTransition(
        jax.tree.map(lambda x: x[:T], window.obs),
        window.action[:T],
        returns,
        discounts,
        jax.tree.map(bootstrap, window.next_obs, window.obs),
    )


def item_stride(use: ReplayUse) -> int:
    """Steps between consecutive items of one env: 1 (n-step transitions), or a
    sequence's stride L - overlap."""
    if use.sequence_length:
        return use.sequence_length - use.sequence_overlap
    return 1


def item_starts(use: ReplayUse, window_len: int) -> list[int]:
    """The window positions where the items `store` takes from a window of `window_len`
    steps start: 0, stride, ... while an item's steps (n, or L) fit in the window."""
    return sequence_starts(window_len, use.sequence_length or use.n_step, item_stride(use))


def unstored_steps(use: ReplayUse, window_len: int) -> int:
    """The steps of a window of `window_len` steps from the first item start it does not
    store on (all of them while it stores none). A window with no look-ahead (the host
    executor's rounds, which have no prefill) carries these into the next one, so every
    item is stored exactly once and items start at the env steps they start at in the
    JAX pipeline: 0, stride, 2·stride, ... of each env's stream."""
    return window_len - len(item_starts(use, window_len)) * item_stride(use)


class ReplayStage(NamedTuple):
    """Pure functions over one device's replay (no leading device axis).

    init:  example item (no batch axis) -> replay state
    example: window -> an example item (zeros), for init
    store: (replay, window [T + carried, B]) -> replay, the n-step transitions starting at
           the window's first T steps (or its sequences)
    advance: (window, trajectory [T, B]) -> the next window: its last `carried` steps,
           then the trajectory
    learn: (agent_learn, learner, replay, env_steps, key, stacked=False) ->
           (learner, replay, metrics, learned: bool []); `stacked`: every leaf of the
           replay has a leading axis of 1 (the pipeline's [D, ...] replay inside
           shard_map), kept on the way in and out and dropped only where the update
           reads the buffer
    """

    init: Callable
    store: Callable
    advance: Callable
    learn: Callable
    n_step: int
    example: Callable
    carried: int  # steps the window keeps from one tick to the next: n - 1, or L - stride


def _same(tree):
    return tree


class StageSpec(NamedTuple):
    """What `make_replay_stage` fixes about one device's replay; its methods are the
    stage's functions (ReplayStage's)."""

    use: ReplayUse
    config: Any  # ReplayConfig
    capacity: int  # this device's share of the replay
    batch: int  # this device's share of a sampled batch
    total_steps: int  # the run's env steps: the importance-weight exponent's schedule
    axis_name: str | None

    @property
    def is_prioritized(self) -> bool:
        return self.config.kind == "prioritized"

    @property
    def carried(self) -> int:
        if self.use.sequence_length:
            length = self.use.sequence_length
            return length - (length - self.use.sequence_overlap)  # L - stride
        return self.use.n_step - 1

    def items_of(self, window):
        """The items the window's first T steps start: n-step transitions, or sequences."""
        if self.use.sequence_length:
            length = self.use.sequence_length
            return window_sequences(window, length, length - self.use.sequence_overlap)
        return nstep_transitions(window, self.use.n_step, self.use.gamma)

    def example(self, window):
        return jax.tree.map(lambda x: jnp.zeros(x.shape[2:], x.dtype), self.items_of(window))

    def init(self, example):
        if self.is_prioritized:
            return prioritized.init(self.capacity, example, alpha=self.config.alpha)
        return ring.init(self.capacity, example)

    def store(self, replay, window):
        items = jax.tree.map(
            lambda x: x.reshape(-1, *x.shape[2:]),  # [T * B] time-major
            self.items_of(window),
        )
        return prioritized.add(replay, items) if self.is_prioritized else ring.add(replay, items)

    def advance(self, window, traj):
        carried = self.carried
        if carried == 0:
            return traj
        keep = jax.tree.map(lambda x: x[x.shape[0] - carried :], window)
        return jax.tree.map(lambda a, b: jnp.concatenate([a, b]), keep, traj)

    def sample(self, replay, key, beta):
        if self.is_prioritized:
            return prioritized.sample(replay, key, self.batch, beta, axis_name=self.axis_name)
        if self.axis_name is not None:
            key = jax.random.fold_in(key, jax.lax.axis_index(self.axis_name))
        return ring.sample(replay, key, self.batch)

    def priorities_of(self, replay):
        """The part of the replay that learning changes (None for uniform replay)."""
        return (replay.tree, replay.max_priority) if self.is_prioritized else None

    @staticmethod
    def with_priorities(replay, part):
        return replay if part is None else replay.replace(tree=part[0], max_priority=part[1])

    def learn(self, agent_learn: LearnFn, learner, replay, env_steps, key, stacked=False):
        squeeze = (lambda tree: jax.tree.map(lambda x: x[0], tree)) if stacked else _same
        unsqueeze = (lambda tree: jax.tree.map(lambda x: x[None], tree)) if stacked else _same
        config = self.config
        progress = jnp.minimum(env_steps.astype(jnp.float32) / self.total_steps, 1.0)
        beta = config.beta + (1.0 - config.beta) * progress

        # Only the learner and the priorities travel through the loop and the cond: the
        # stored items are read, never written, so XLA can leave them where they are
        # (carried through, a 1e5 x 800-float buffer was copied every tick).
        def updates(operand):
            def one(carry, update_key):
                learner, part = carry
                current = squeeze(self.with_priorities(replay, part))
                sample_key, learn_key = jax.random.split(update_key)
                drawn = self.sample(current, sample_key, beta)
                learner, metrics, priorities = agent_learn(learner, drawn, learn_key)
                if self.is_prioritized:
                    if priorities is None:
                        raise ValueError(
                            "prioritized replay needs the agent's learn to return priorities"
                        )
                    current = prioritized.update_priorities(
                        current,
                        drawn.indices,
                        jnp.abs(priorities) + config.priority_eps,
                        axis_name=self.axis_name,
                    )
                return (learner, unsqueeze(self.priorities_of(current))), metrics

            (learner, part), metrics = jax.lax.scan(
                one, operand, jax.random.split(key, self.use.updates_per_tick)
            )
            metrics = jax.tree.map(jnp.mean, metrics)
            return learner, part, {**metrics, "replay_beta": beta}

        # Learn once the actor has taken `learning_starts` steps (the replay then holds
        # those and the first window). env_steps is replicated: every device agrees.
        learned = env_steps >= config.learning_starts
        operand = (learner, self.priorities_of(replay))
        metric_shapes = jax.eval_shape(updates, operand)[2]

        def wait(operand):
            zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metric_shapes)
            return (*operand, zeros)

        learner, part, metrics = jax.lax.cond(learned, updates, wait, operand)
        return learner, self.with_priorities(replay, part), metrics, learned


def make_replay_stage(
    use: ReplayUse, config: Any, num_devices: int, total_steps: int, axis_name: str | None = None
) -> ReplayStage:
    """`config` is a ReplayConfig; capacity and batch are over all `num_devices` devices."""
    spec = StageSpec(
        use,
        config,
        config.capacity // num_devices,
        config.batch_size // num_devices,
        total_steps,
        axis_name,
    )
    return ReplayStage(
        init=spec.init,
        store=spec.store,
        advance=spec.advance,
        learn=spec.learn,
        n_step=use.n_step,
        example=spec.example,
        carried=spec.carried,
    )
