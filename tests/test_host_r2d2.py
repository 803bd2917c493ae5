"""R2D2 on host envs (`host/replay_learner.py`): the learner cuts the actors' trajectories
into the sequences the JAX pipeline's replay stage cuts (replay/stage.py,
replay/sequences.py), each env's starting at its steps 0, stride, 2·stride, ... with the
carry its actor held there, windows crossing rounds; a run does not depend on the actor
threads at lag 0 or 1; a checkpoint holds the sequence replay and the carried window
exactly, and a resume is a function of the checkpoint; the shipped config learns masked
CartPole.

The fast runs step the tiny corridor of tests/helpers/host_envs.py with a small GRU R2D2.
"""

from __future__ import annotations

import shutil
from typing import NamedTuple

import jax
import numpy as np
import pytest

from jaxrl_async import train
from jaxrl_async.agents.r2d2 import RecurrentQNetwork, Unroller, time_major
from jaxrl_async.config.loader import load_config
from jaxrl_async.host import train_host
from jaxrl_async.host.replay_learner import ReplayLearner
from jaxrl_async.replay.sequences import sequence_starts, window_sequences
from tests.helpers import host_envs  # noqa: F401  (registers the corridor envs)
from tests.helpers.host_runs import CORRIDOR, bounded, record_executors, with_threads

ENVS, T, LENGTH, OVERLAP = 4, 8, 8, 4
STRIDE = LENGTH - OVERLAP


def r2d2_config(*overrides: str, rounds: int = 6):
    """A small GRU R2D2 on the corridor: 4 envs x 8 steps a round over 2 actor threads,
    sequences of 8 steps every 4 (a burn-in of 2), learning from round 1 on."""
    return load_config(
        "r2d2_cartpole_masked",
        [
            f"env.name={CORRIDOR}",
            "env.mask_obs=[]",
            f"env.num_envs={ENVS}",
            f"pipeline.rollout_len={T}",
            "pipeline.actor_threads=2",
            f"agent.sequence_length={LENGTH}",
            f"agent.sequence_overlap={OVERLAP}",
            "agent.burn_in=2",
            "agent.hidden_sizes=[8]",
            "agent.memory_size=8",
            "agent.updates_per_tick=2",
            "agent.epsilon_decay_steps=200",
            "replay.capacity=256",
            "replay.batch_size=8",
            "replay.learning_starts=64",
            "train.log_every=64",
            "train.progress=false",
            f"train.total_steps={ENVS * T * rounds}",
            *overrides,
        ],
    )


def leaves_equal(a, b) -> None:
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def spy_on_rounds(monkeypatch) -> list[tuple]:
    """(the round's trajectory, the replay's size after it) of every round the replay
    learner is handed, in numpy."""
    seen: list[tuple] = []
    learn = ReplayLearner.learn

    def recording(self, learner, carry, traj, r, key, obs_stats=None):
        out = learn(self, learner, carry, traj, r, key, obs_stats)
        seen.append((jax.tree.map(np.asarray, traj), int(out[1].replay.ring.size)))
        return out

    monkeypatch.setattr(ReplayLearner, "learn", recording)
    return seen


class Cut(NamedTuple):
    """How a run cuts sequences: its rollout and its sequences' length and overlap."""

    rollout_len: int
    length: int
    overlap: int

    @property
    def stride(self) -> int:
        return self.length - self.overlap


CUTS = [
    Cut(T, LENGTH, OVERLAP),  # the window carries L - stride steps, as the JAX stage's
    Cut(8, 6, 2),  # L not a multiple of the stride: the window starts at a sequence start
    Cut(4, 8, 4),  # T < L: the first round stores nothing
]


def assert_carries_are_the_actors(config, params, stored, cut: Cut) -> None:
    """Re-running every stored sequence from its stored carry with `params` (those that
    acted: no update was made) gives, after `stride` steps, the carry stored with the
    env's next sequence."""
    agent = config.agent
    net = RecurrentQNetwork(agent.torso_spec(), agent.memory_spec(), 2)
    unroller = Unroller(net, params)
    seq = time_major(stored)  # [L, count, ...]
    _, carries = jax.jit(unroller.unroll)(stored.carry, seq.obs, seq.episode_start)
    count = len(stored.reward)
    after_stride = jax.tree.map(lambda c: np.asarray(c[cut.stride - 1, : count - ENVS]), carries)
    next_stored = jax.tree.map(lambda c: c[ENVS:], stored.carry)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), after_stride, next_stored
    )


@pytest.mark.parametrize("cut", CUTS, ids=str)
def test_replay_holds_every_envs_sequences_with_the_actors_carries(monkeypatch, cut):
    """Round by round the replay holds exactly the sequences the JAX rule cuts from the
    whole run so far (starts 0, stride, ... whose L steps are known; time-major, so in
    the order of their starts), each with the Memory the actor recorded at its first
    step: windows cross rounds and actor threads, nothing is stored twice, and the window
    carries the steps from the first start not yet stored. With no update (learning_starts
    beyond the run), the stored carries are those the actor acted from."""
    rounds, T = 6, cut.rollout_len
    seen = spy_on_rounds(monkeypatch)
    config = r2d2_config(
        "pipeline.lag=0",
        "replay.learning_starts=100000",
        f"pipeline.rollout_len={T}",
        f"agent.sequence_length={cut.length}",
        f"agent.sequence_overlap={cut.overlap}",
        f"train.total_steps={ENVS * T * rounds}",
    )
    result = bounded(lambda: train_host(config), 120.0)
    assert result["updates"] == 0 and len(seen) == rounds
    stream = jax.tree.map(lambda *xs: np.concatenate(xs), *[traj for traj, _ in seen])
    assert stream.memory is not None and stream.memory.episode_start[0].all()
    want = jax.tree.map(
        lambda x: np.asarray(x).reshape(-1, *x.shape[2:]),  # [N * B] time-major
        window_sequences(stream, cut.length, cut.stride),
    )
    starts = [sequence_starts((r + 1) * T, cut.length, cut.stride) for r in range(rounds)]
    sizes = [size for _, size in seen]
    assert sizes == [len(s) * ENVS for s in starts]
    assert sizes[-1] - sizes[-2] == ENVS * T // cut.stride  # T / stride a round, once going
    stored = jax.tree.map(lambda x: np.asarray(x[: sizes[-1]]), result["replay"].replay.ring.items)
    leaves_equal(stored, want)
    assert np.asarray(stored.episode_start[:, 1:]).any()  # resets inside sequences happen
    window = result["replay"].window
    first_waiting = len(starts[-1]) * cut.stride
    leaves_equal(window, jax.tree.map(lambda x: x[first_waiting:], stream._replace(extras={})))
    assert_carries_are_the_actors(config, result["params"], stored, cut)


@pytest.mark.parametrize("lag", [0, 1])
def test_a_seed_gives_the_same_run_over_one_or_two_actor_threads(lag):
    """Parameters, replay (its sequences, carries and priorities) and carried window are
    the same with one actor thread as with two, at lag 0 and at lag 1."""
    config = r2d2_config(f"pipeline.lag={lag}")
    one = bounded(lambda: train_host(with_threads(config, 1)), 120.0)
    two = bounded(lambda: train_host(config), 120.0)
    assert one["updates"] == two["updates"] == 5
    assert float(two["replay"].replay.max_priority) != 1.0  # priorities were written back
    leaves_equal(one["params"], two["params"])
    leaves_equal(one["replay"], two["replay"])


def test_checkpoint_restores_the_sequence_replay_and_resume_follows_from_it(tmp_path, monkeypatch):
    """A host run's resume restarts the envs and the actors' carries from fresh seeded
    resets (training/host_engine.py), so it continues the learner, not the env streams: the
    resumed executor starts from exactly the checkpointed learner, sequence replay and
    carried window (its carries included), and two resumes of one checkpoint end with
    the same parameters and replay. The window carried over completes the sequences that
    cross the resume: every resumed round stores T / stride sequences per env."""
    calls = record_executors(monkeypatch)
    run = tmp_path / "run"
    train(r2d2_config("checkpoint.every=64", rounds=6), run_dir=run)
    shutil.copytree(run, tmp_path / "copy")
    first = calls[0]["last"]
    for run_dir in (run, tmp_path / "copy"):
        train(r2d2_config("checkpoint.every=64", rounds=10), run_dir=run_dir, resume=True)
    (start, second), (other_start, third) = [(c["start"], c["last"]) for c in calls[1:]]
    assert (start.round, start.updates) == (6, first.updates)
    assert start.replay.window.memory is not None
    leaves_equal((start.state, start.replay), (first.state, first.replay))
    leaves_equal((other_start.state, other_start.replay), (start.state, start.replay))
    assert int(second.replay.replay.ring.size) == ENVS * (1 + 2 * 9)
    assert second.updates == first.updates + 4
    leaves_equal((second.state.params, second.replay), (third.state.params, third.replay))


def r2d2_cartpole_returns(seeds: range, overrides: list[str]) -> np.ndarray:
    """The final returns of `seeds` of the shipped r2d2_gymnasium_cartpole config, trained
    one after another (a host env runs one seed per run: train.num_seeds is refused)."""
    returns = []
    for seed in seeds:
        config = load_config(
            "r2d2_gymnasium_cartpole", [*overrides, "train.progress=false", f"train.seed={seed}"]
        )
        assert config.env.mask_obs == (1, 3)
        returns.append(bounded(lambda config=config: train_host(config), 120.0)["final_return"])
    return np.asarray(returns)


@pytest.mark.slow
def test_r2d2_learns_masked_gymnasium_cartpole():
    """Three seeds of the shipped config cut to its first 30k env steps, velocities
    masked, one after another: the median final return (the last 8 episodes' mean) is
    far above a random policy's (about 22)."""
    returns = r2d2_cartpole_returns(range(3), ["train.total_steps=30000"])
    assert np.median(returns) > 80, returns
