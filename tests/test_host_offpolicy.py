"""Off-policy agents on host envs (`host/replay_learner.py`): the learner keeps the
replay on its device and stores every env step exactly once, as the start of one n-step
transition; DQN with prioritized replay, SAC and TD3 train; checkpoints hold the exact
replay and window, and a resume continues from them; lag 0 reproduces a run.

The fast runs step the tiny corridor of tests/helpers/host_envs.py (DQN) or Gymnasium's
Pendulum-v1 (SAC, TD3).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxrl_async.config.loader import load_config
from jaxrl_async.errors import ConfigError
from jaxrl_async.host import make_actor_envs, make_host_agent, train_host
from jaxrl_async.host.policy import ActorPolicy
from jaxrl_async.host.replay_learner import ReplayLearner
from jaxrl_async.host.saved import saved_state
from jaxrl_async.replay.stage import nstep_transitions
from jaxrl_async.run import checkpoint as ckpt
from jaxrl_async.training.trainer import train
from tests.helpers import host_envs  # noqa: F401  (registers the corridor envs)
from tests.helpers.host_runs import (
    bounded,
    cartpole_final_returns,
    dqn_config,
    random_trajectory,
    record_executors,
)


def leaves_equal(a, b) -> None:
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize(("rollout_len", "n_step"), [(4, 3), (1, 3), (4, 1)])
def test_every_step_stored_once_as_its_nstep_transition(rollout_len, n_step):
    """Round by round the replay holds exactly the n-step transitions that start at every
    step of the run so far whose n steps are known, in order, as one window over the whole
    run would give them: windows cross rounds, and nothing is stored twice."""
    config = dqn_config(
        f"pipeline.rollout_len={rollout_len}",
        f"agent.n_step={n_step}",
        "replay.learning_starts=100000",
    )
    envs = make_actor_envs(config)
    try:
        agent = make_host_agent(config, envs[0].spec)
        learner = ReplayLearner(agent, config, envs[0].spec)
    finally:
        for env in envs:
            env.close()
    rng = np.random.default_rng(0)
    trajs = [random_trajectory(rng, rollout_len, 4) for _ in range(6)]
    run = jax.tree.map(lambda *xs: np.concatenate(xs), *trajs)._replace(extras={})
    # a transition depends only on its own n steps: those of the whole run, in time order
    want = nstep_transitions(run, n_step, agent.replay.gamma)
    want = jax.tree.map(lambda x: np.asarray(x).reshape(-1, *x.shape[2:]), want)
    state, carry = agent.init(jax.random.key(0)), learner.init()
    for r, traj in enumerate(trajs):
        state, carry, _, learned = learner.learn(state, carry, traj, r, jax.random.key(1))
        assert not learned
        steps = (r + 1) * rollout_len
        count = max(0, steps - n_step + 1) * 4
        assert int(carry.replay.ring.size) == count
        stored = jax.tree.map(lambda x: np.asarray(x[:count]), carry.replay.ring.items)
        leaves_equal(stored, jax.tree.map(lambda x: x[:count], want))
        kept = min(n_step - 1, steps)
        window = jax.tree.map(lambda x: x[steps - kept : steps], run)
        leaves_equal(carry.window, window if kept else None)


def test_dqn_prioritized_trains_on_the_corridor():
    """Through `train_host`: every env step but the last n - 1 of each env is in the
    replay, updates counted from learning_starts on, priorities written back."""
    records: list[dict] = []
    result = bounded(lambda: train_host(dqn_config(), callbacks=[records.append]), 120.0)
    replay = result["replay"].replay
    assert int(replay.ring.size) == 10 * 16 - 2 * 4
    assert [rec["learning"] for rec in records] == [0.0] + [1.0] * 9
    assert result["updates"] == 9 and result["env_steps"] == 160
    assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(result["params"]))
    assert all(np.isfinite(rec["loss"]) for rec in records)
    leaves = np.asarray(replay.tree.leaves)[: int(replay.ring.size)]
    assert np.isfinite(leaves).all() and len(np.unique(leaves)) > 1  # not all the initial
    assert float(replay.max_priority) != 1.0
    # the importance-weight exponent anneals from replay.beta over the run's env steps
    assert records[1]["replay_beta"] == pytest.approx(0.4 + 0.6 * 32 / 160)
    assert records[-1]["replay_beta"] == pytest.approx(1.0)


def test_dqn_exploration_follows_the_actor_clock():
    """The host actor's clock counts the steps of all envs (step x num_envs), as the JAX
    rollout's does: with epsilon annealed from 1 to 0 over 100 env steps, 64 envs act at
    random at step 0 and all greedily from step 2 (128 env steps) on."""
    config = dqn_config("agent.epsilon_end=0.0", "agent.epsilon_decay_steps=100")
    envs = make_actor_envs(config)
    try:
        agent = make_host_agent(config, envs[0].spec)
    finally:
        for env in envs:
            env.close()
    policy = ActorPolicy(agent, jax.random.key(0), 0, 64, 64)
    params = policy.prepare(agent.init(jax.random.key(0)).params)
    obs = np.zeros((64, 2), np.float32)
    random = np.asarray(policy(params, None, obs, np.int32(0)).action)
    assert len(np.unique(random)) == 2
    for step in (2, 3, 50):
        greedy = np.asarray(policy(params, None, obs, np.int32(step)).action)
        assert (greedy == greedy[0]).all(), step


def test_lag0_same_seed_same_parameters_and_replay():
    config = dqn_config("pipeline.lag=0", rounds=6)
    first = bounded(lambda: train_host(config), 120.0)
    second = bounded(lambda: train_host(config), 120.0)
    leaves_equal(first["params"], second["params"])
    leaves_equal(first["replay"], second["replay"])


@pytest.mark.parametrize("agent", ["sac", "td3"])
def test_continuous_agents_train_on_pendulum(agent):
    config = load_config(
        f"{agent}_pendulum",
        [
            "env.name=gymnasium:Pendulum-v1",
            "env.num_envs=2",
            "pipeline.rollout_len=4",
            "agent.hidden_sizes=[16]",
            "agent.updates_per_tick=2",
            "replay.capacity=256",
            "replay.batch_size=16",
            "replay.learning_starts=16",
            "train.total_steps=64",
        ],
    )
    records: list[dict] = []
    result = bounded(lambda: train_host(config, callbacks=[records.append]), 120.0)
    assert result["updates"] == 7 and int(result["replay"].replay.size) == 64
    assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(result["state"]))
    metrics = [v for rec in records for k, v in rec.items() if k != "episode_return"]
    assert all(np.isfinite(v) for v in metrics if isinstance(v, float))  # none ended: nan
    assert records[-1]["learning"] == 1.0


@pytest.mark.parametrize("normalised", [False, True])
def test_checkpoint_and_resume_continue_with_the_exact_replay(tmp_path, monkeypatch, normalised):
    """The last checkpoint holds the run's learner, replay and window leaf for leaf (and
    under env.normalize_obs its observation statistics), and a resume starts its executor
    from exactly those."""
    extra = ["env.normalize_obs=true"] if normalised else []
    calls = record_executors(monkeypatch)
    run = tmp_path / "run"
    config = dqn_config("checkpoint.every=48", *extra, rounds=6)
    train(config, run_dir=run)
    first = calls[0]["last"]
    stats = first.obs_stats
    assert (stats is not None) == normalised
    like = saved_state(first.state, 0, first.replay, stats)
    restored, _ = ckpt.restore(run / "checkpoints", like)
    assert ckpt.steps(run / "checkpoints")[-1] == 96
    saved = saved_state(first.state, first.updates, first.replay, stats)
    leaves_equal(restored, saved)

    train(dqn_config("checkpoint.every=48", *extra), run_dir=run, resume=True)
    start, second = calls[1]["start"], calls[1]["last"]
    # Resumed, the carried window's last step ends its episodes (the envs restart fresh).
    ready = calls[1]["ready"].replay.window
    assert ready.truncated[-1].all() and not start.replay.window.truncated[-1].all()
    leaves_equal(ready._replace(truncated=None), start.replay.window._replace(truncated=None))
    assert (start.round, start.updates) == (6, first.updates)
    leaves_equal((start.state, start.replay), (first.state, first.replay))
    leaves_equal(start.obs_stats, stats)
    assert int(second.replay.replay.ring.size) == 160 - 2 * 4  # the window carried over
    if normalised:  # every step acted on, the first run's and the resumed one's
        assert second.obs_stats.n == pytest.approx(160 + 1e-4)


def test_max_staleness_refused_off_policy():
    with pytest.raises(ConfigError, match="max_staleness applies to on-policy"):
        dqn_config("pipeline.lag=1", "pipeline.max_staleness=1")


@pytest.mark.slow
def test_dqn_learns_gymnasium_cartpole():
    """Three seeds, one after another, at lag 1: the median final return is far above a
    random policy's (about 22)."""
    returns = cartpole_final_returns(
        "dqn_cartpole",
        ["replay.learning_starts=1000", "agent.epsilon_decay_steps=10000"]
        + ["train.total_steps=100000"],
        300.0,
    )
    assert np.median(returns) > 150, returns
