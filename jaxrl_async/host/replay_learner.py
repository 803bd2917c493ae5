"""The host executor's learner for off-policy agents (`agent.data == "replay"`: the DQN
family, SAC, TD3, and R2D2's sequences): the replay stays on the learner's device, beside
the agent's state.

Each round the learner runs one jitted step, built from the JAX pipeline's replay stage
(`replay/stage.py`'s `make_replay_stage`), not a copy of it:

    window = the steps carried from earlier rounds, then this round's trajectory [T, B]
    store:  `stage.store`: the items starting at the window's item starts (`item_starts`):
            every step whose n-step future is known (n-step transitions), or, for a
            recurrent agent that replays sequences (R2D2), every stride-th step whose L
            steps are known, each sequence with the carry the actor held before its first
            step (`replay/sequences.py`) -> the replay
    learn:  `stage.learn`: updates_per_tick times sample, the agent's `learn`, priorities
            written back, once `replay.learning_starts` env steps were taken
    carry:  the window's steps from its first item start not stored on
            (`unstored_steps`): the last n - 1 steps, or those of the sequences still
            waiting for their last steps, for the next round

Under env.normalize_obs the replay holds raw observations, as the JAX pipeline's does:
each sampled batch is normalised with the statistics the learner holds when it is drawn
(`ticks.learn_seen` with the JAX wrapper's `observe`), those of every observation the
actors acted on, this round's included.

So every item is stored exactly once, windows crossing rounds as they cross ticks in the
JAX pipeline: every env step as the start of one n-step transition, or every env's
sequences starting at its steps 0, stride, 2·stride, ... (stride = L - overlap divides
T), each step in L / stride sequences (the first ones fewer), as the JAX rule gives them.
The JAX pipeline prefills its first window before the first tick; a host run has no
prefill, so a window looks no further than its round and the items that need later steps
wait for the next round: the first round stores T - n + 1 transitions per env (or the
sequences that fit in T steps), and the carried window grows to its steady length over
the first rounds (`carried_steps`), after which every round stores T items (T / stride
sequences) per env. The clock the stage reads is the env steps of all rounds so far,
this one's included: the importance-weight exponent anneals over it and learning starts
once it reaches `learning_starts`.

The replay and the carried window are part of the learner's state (`ReplayCarry`), which
a checkpoint holds and a resume restores exactly (`template` gives its shapes for a
number of rounds done). The window holds only what the items read: the actor's extras
are dropped, a recurrent agent's `Memory` (carry, episode starts) kept, and every field
is cast to the env spec's dtypes (the memory to the agent's initial one's).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.envs.wrappers import NormalizeObservation
from jaxrl_async.host.obs_norm import CLIP, EPS, ObsStats
from jaxrl_async.pipeline.ticks import learn_seen
from jaxrl_async.replay.stage import item_starts, make_replay_stage, unstored_steps
from jaxrl_async.types import Agent, Memory, Transition

# What the agent sees of a sampled raw observation under host statistics (an ObsStats
# of float32 arrays): the JAX envs' normalisation, its constants the host's.
observe = NormalizeObservation(None, clip=CLIP, eps=EPS).observe  # type: ignore[arg-type]


class ReplayCarry(NamedTuple):
    """What the off-policy learner keeps on its device across rounds."""

    replay: Any  # the replay state (ring or prioritized), one device's, no device axis
    window: Any  # Transition [carried_steps(rounds), B, ...], None while it holds none


def resumed(carry: ReplayCarry) -> ReplayCarry:
    """A restored carry for a resumed run: the carried window's last step truncates its
    episodes. The envs restart from fresh resets, so no step follows it in its stream;
    an n-step return (or a sequence's targets) reaching it bootstraps from its own true
    next observation instead of adding the fresh episodes' rewards."""
    window = carry.window
    if window is None:
        return carry
    truncated = np.asarray(window.truncated).copy()
    truncated[..., -1, :] = True  # [.., T, B]: the last step of every env (of every run)
    return carry._replace(window=window._replace(truncated=truncated))


def step_example(spec, num_envs: int, memory: Memory | None = None) -> Transition:
    """Zeros of one step of every env [1, B, ...] in the dtypes the window keeps;
    `memory`: the shapes of a recurrent agent's initial Memory [B, ...] (None:
    memoryless)."""

    def zeros(shape, dtype):
        return np.zeros((1, num_envs, *shape), dtype)

    if isinstance(spec.obs_shape, dict):
        obs: Any = {k: zeros(s, spec.obs_dtype[k]) for k, s in spec.obs_shape.items()}
    else:
        obs = zeros(spec.obs_shape, spec.obs_dtype)
    return Transition(
        obs=obs,
        action=zeros(spec.action_shape, spec.action_dtype),
        reward=zeros((), np.float32),
        terminated=zeros((), np.bool_),
        truncated=zeros((), np.bool_),
        next_obs=jax.tree.map(np.copy, obs),
        extras={},
        version=zeros((), np.int32),
        memory=None if memory is None else jax.tree.map(_zeros_step, memory),
    )


def _zeros_step(x):
    return np.zeros((1, *x.shape), x.dtype)


def _float32(x):
    return np.asarray(x, np.float32)


def _concat(a, b):
    return b if a is None else jax.tree.map(lambda x, y: jnp.concatenate([x, y]), a, b)


class ReplayLearner:
    """The off-policy learner's step and state, for `agent` on envs of `spec`; for
    seed-batched runs (`seeds`, `seeds.py`) each run's replay and window, stacked on a
    leading axis, and the step vmapped over them."""

    def __init__(self, agent: Agent, config, spec, seeds: tuple[int, ...] | None = None):
        assert agent.replay is not None and agent.data == "replay"
        self.use = agent.replay
        self.rollout_len = config.pipeline.rollout_len
        self.batch = config.batch_size
        self.learning_starts = config.replay.learning_starts
        num_envs = config.env.num_envs
        # shapes only: a learner may be built where JAX traces (host/footprint.py)
        memory = jax.eval_shape(lambda: agent.initial_memory(num_envs))
        self.example = step_example(spec, num_envs, memory)
        self.stage = make_replay_stage(
            agent.replay, config.replay, 1, config.num_updates * config.batch_size
        )
        # The replay is updated in place (its buffers donated; the window changes shape):
        # a copy of it every round would cost more than the round's updates once it holds
        # image frames.
        self._agent_learn = agent.learn
        self.runs = None if seeds is None else len(seeds)
        # every run's window, trajectory, key and statistics its own; the env steps shared
        step = self._round if seeds is None else jax.vmap(self._round, (0, 0, 0, 0, None, 0, 0))
        self._step = jax.jit(step, donate_argnums=(1,))

    def carried_steps(self, rounds: int) -> int:
        """The steps the window carries after `rounds` rounds: each round's window (the
        carried steps, then T) keeps its `unstored_steps`; once a round carries what the
        one before did, every later one does (n - 1 steps for n-step transitions)."""
        carried = 0
        for _ in range(rounds):
            kept = unstored_steps(self.use, carried + self.rollout_len)
            if kept == carried:
                break
            carried = kept
        return carried

    def _zeros_window(self, steps: int):
        return jax.tree.map(lambda x: np.repeat(x, steps, axis=0), self.example)

    def _each_run(self, tree):
        """`tree` for every run of seed-batched ones (a copy each), or as it is."""
        runs = self.runs
        if runs is None:
            return tree
        return jax.tree.map(lambda x: np.repeat(np.asarray(x)[None], runs, axis=0), tree)

    def init(self) -> ReplayCarry:
        """An empty replay and no carried window (a fresh run; every run's)."""
        item = self.stage.example(self._zeros_window(self.use.sequence_length or self.use.n_step))
        init = self.stage.init
        if self.runs is not None:
            init = jax.vmap(self.stage.init, in_axes=None, axis_size=self.runs)
        return ReplayCarry(jax.jit(init)(item), None)

    def template(self, rounds: int) -> ReplayCarry:
        """A ReplayCarry shaped as after `rounds` rounds (a checkpoint's template)."""
        fresh = self.init()
        steps = self.carried_steps(rounds)
        window = self._each_run(self._zeros_window(steps)) if steps else None
        return fresh._replace(window=window)

    def as_window(self, traj: Transition) -> Transition:
        """A round's trajectory [T, B] with what the window keeps, in its dtypes."""
        memory = None if self.example.memory is None else traj.memory
        kept = traj._replace(extras={}, memory=memory)
        return jax.tree.map(lambda x, like: np.asarray(x, like.dtype), kept, self.example)

    def _round(self, learner, replay, window, traj, env_steps, key, obs_stats):
        window = _concat(window, traj)
        steps = window.reward.shape[0]
        if item_starts(self.use, steps):  # static: none only in the first rounds when T < n or L
            replay = self.stage.store(replay, window)
        else:  # nothing stored yet: wait (the stage learns from env_steps >= learning_starts)
            env_steps = jnp.minimum(env_steps, self.learning_starts - 1)
        agent_learn = self._agent_learn
        if obs_stats is not None:  # static: env.normalize_obs
            agent_learn = learn_seen(agent_learn, observe, obs_stats)
        learner, replay, metrics, learned = self.stage.learn(
            agent_learn, learner, replay, env_steps, key
        )
        keep = unstored_steps(self.use, steps)
        carried = jax.tree.map(lambda x: x[steps - keep :], window) if keep else None
        return learner, ReplayCarry(replay, carried), metrics, learned

    def learn(
        self,
        learner,
        carry: ReplayCarry,
        traj: Transition,
        r: int,
        key,
        obs_stats: ObsStats | None = None,
    ):
        """(learner, carry, metrics, learned: bool) after round r's trajectory [T, B] (of
        raw observations); `obs_stats`: the statistics each sampled batch is normalised
        with (None: observations not normalised)."""
        env_steps = jnp.int32((r + 1) * self.batch)
        stats = None if obs_stats is None else jax.tree.map(_float32, obs_stats)
        learner, carry, metrics, learned = self._step(
            learner, carry.replay, carry.window, self.as_window(traj), env_steps, key, stats
        )
        metrics = {**metrics, "learning": learned.astype(jnp.float32)}
        return learner, carry, metrics, bool(jnp.any(learned))  # every run's alike
