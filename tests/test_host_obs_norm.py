"""Observation normalisation on host envs (`host/obs_norm.py`): the JAX wrapper's
statistics in numpy, what the actor acts on and hands in, and the statistics a run
checkpoints, resumes from and evaluates with; with a replay agent, raw observations
stored and each sampled batch normalised with the learner's statistics."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async import train
from jaxrl_async.config.loader import load_config
from jaxrl_async.envs.wrappers import NormalizeObservation, NormState
from jaxrl_async.evaluation.host import evaluate_host_run
from jaxrl_async.host import make_actor_envs, make_gymnasium, make_host_agent, train_host
from jaxrl_async.host.actor import Acting, Trajectory, _obs_moments, rollout
from jaxrl_async.host.executor import Learner, Progress, learn_round
from jaxrl_async.host.obs_norm import (
    PRIOR_COUNT,
    ObsStats,
    from_saved,
    initial_stats,
    merge,
    moments,
    normalize,
)
from jaxrl_async.host.replay_learner import ReplayLearner
from jaxrl_async.host.saved import saved_state
from jaxrl_async.run import checkpoint as ckpt
from jaxrl_async.types import Transition
from tests.helpers.host_runs import (
    CORRIDOR,
    SMALL,
    SeeingPolicy,
    bounded,
    dqn_config,
    random_trajectory,
)

NORMALISED = [f"env.name={CORRIDOR}", "env.normalize_obs=true", *SMALL]


def test_statistics_and_normalisation_match_the_jax_wrapper():
    rng = np.random.default_rng(0)
    wrapper = NormalizeObservation(None)
    shape = (3,)
    ours = initial_stats(shape)
    theirs = NormState(None, jnp.zeros(shape), jnp.ones(shape), jnp.float32(PRIOR_COUNT))
    for size in (5, 1, 17):
        batch = rng.normal(2.0, 3.0, (size, *shape)).astype(np.float32)
        ours = merge(ours, moments(batch, shape))
        theirs = wrapper._update(theirs, jnp.asarray(batch))
    np.testing.assert_allclose(ours.mean, theirs.mean, rtol=1e-5)
    np.testing.assert_allclose(ours.var, theirs.var, rtol=1e-5)
    np.testing.assert_allclose(ours.n, theirs.count, rtol=1e-6)
    probe = rng.normal(0.0, 40.0, (4, *shape)).astype(np.float32)
    np.testing.assert_allclose(
        normalize(ours, probe), wrapper.normalize(theirs, jnp.asarray(probe)), atol=1e-4
    )
    assert np.abs(normalize(ours, probe)).max() <= 10.0


def test_merging_batch_moments_in_order_is_the_moments_of_all_of_them():
    rng = np.random.default_rng(1)
    batches = [rng.uniform(0, 5, (n, 2)) for n in (3, 8, 2)]
    stats = initial_stats((2,))
    for b in batches:
        stats = merge(stats, moments(b, (2,)))
    every = np.concatenate(batches)
    # The prior (mean 0, variance 1, count 1e-4) is all that separates them.
    np.testing.assert_allclose(stats.mean, every.mean(0), rtol=1e-4)
    np.testing.assert_allclose(stats.var, every.var(0), rtol=1e-4)
    assert stats.n == pytest.approx(len(every) + PRIOR_COUNT)


def test_the_actor_acts_on_and_hands_in_normalised_obs_and_reports_raw_moments():
    env = make_gymnasium(CORRIDOR, 3, vectorization_mode="sync", autoreset_mode="same_step")
    policy = SeeingPolicy()

    stats = ObsStats(np.array([1.0, 2.0]), np.array([4.0, 0.25]), np.float64(10.0))
    try:
        first = env.reset(0)
        acting = Acting(None, 0, stats)
        _, traj, steps, _ = rollout(env, policy, acting, (first, None), 0, 6)
    finally:
        env.close()
    raw = np.stack([first, *(s.obs for s in steps[:-1])])
    np.testing.assert_allclose(traj.obs, normalize(stats, raw))
    np.testing.assert_allclose(np.stack(policy.seen), traj.obs)
    final = np.stack([s.final_obs for s in steps])
    np.testing.assert_allclose(traj.next_obs, normalize(stats, final))
    # one round's statistics: where an episode went on, x'_t is x_t+1 bit for bit
    went_on = ~np.stack([s.terminated | s.truncated for s in steps])[:-1]
    assert went_on.any()
    np.testing.assert_array_equal(traj.next_obs[:-1][went_on], traj.obs[1:][went_on])
    reported = _obs_moments(first, steps, acting)
    np.testing.assert_allclose(reported.mean, raw.reshape(-1, 2).mean(0))
    np.testing.assert_allclose(reported.var, raw.reshape(-1, 2).var(0), rtol=1e-6)
    assert reported.n == 18
    assert _obs_moments(first, steps, Acting(None, 0)) is None


def test_a_run_checkpoints_resumes_and_evaluates_with_its_statistics(tmp_path):
    run = tmp_path / "run"
    config = load_config("ppo_cartpole", [*NORMALISED, "train.total_steps=96"])
    state = train(config, run_dir=run).state
    like = saved_state(state, 0, obs_stats=initial_stats((2,)))
    saved = from_saved(ckpt.restore(run / "checkpoints", like)[0]["obs_stats"])
    # Every observation acted on, 16 per round: the corridor's positions and step counts.
    assert saved.n == pytest.approx(96 + PRIOR_COUNT)
    assert 0.0 < saved.mean[0] < 3.0 and 0.0 < saved.mean[1] < 5.0 and np.all(saved.var > 0)

    longer = load_config("ppo_cartpole", [*NORMALISED, "train.total_steps=160"])
    train(longer, run_dir=run, resume=True)
    resumed = ckpt.restore(run / "checkpoints", like)[0]["obs_stats"]
    assert from_saved(resumed).n == pytest.approx(160 + PRIOR_COUNT)
    result = evaluate_host_run(run, longer, 2, None, None)
    assert result["episodes"] == 2 and np.all(np.isfinite(result["returns"]))


def test_a_replay_agents_actor_acts_on_normalised_obs_and_hands_in_raw_ones():
    """A replay stores raw observations (its learner normalises what it samples): the
    policy still sees them normalised, the trajectory keeps them raw, next_obs too."""
    env = make_gymnasium(CORRIDOR, 3, vectorization_mode="sync", autoreset_mode="same_step")
    policy = SeeingPolicy()

    stats = ObsStats(np.array([1.0, 2.0]), np.array([4.0, 0.25]), np.float64(10.0))
    try:
        first = env.reset(0)
        acting = Acting(None, 0, stats, raw_obs=True)
        _, traj, steps, _ = rollout(env, policy, acting, (first, None), 0, 6)
    finally:
        env.close()
    raw = np.stack([first, *(s.obs for s in steps[:-1])])
    np.testing.assert_array_equal(traj.obs, raw)
    np.testing.assert_array_equal(traj.next_obs, np.stack([s.final_obs for s in steps]))
    np.testing.assert_allclose(np.stack(policy.seen), normalize(stats, raw))
    assert _obs_moments(first, steps, acting).n == 18


def test_normalised_observations_with_a_replay_load():
    config = load_config(
        "dqn_cartpole", ["env.name=gymnasium:CartPole-v1", "env.normalize_obs=true"]
    )
    assert config.env.normalize_obs and config.agent.off_policy


def test_the_learner_merges_the_rounds_moments_before_a_replay_samples():
    """learn_round merges every actor's moments, in actor order, and hands the replay
    learner those statistics: its batches are normalised with the round's own included."""
    given: list = []

    class Replay:
        def learn(self, state, carry, traj, r, key, obs_stats=None):
            given.append(obs_stats)
            return state, carry, {}, False

    rng = np.random.default_rng(2)
    traj = Transition(
        obs=np.zeros((4, 2, 2), np.float32),
        action=np.zeros((4, 2), np.int32),
        reward=np.zeros((4, 2), np.float32),
        terminated=np.zeros((4, 2), bool),
        truncated=np.zeros((4, 2), bool),
        next_obs=np.zeros((4, 2, 2), np.float32),
        extras={},
        version=np.zeros((4, 2), np.int32),
    )
    batches = [rng.normal(3.0, 2.0, (8, 2)) for _ in range(2)]
    parts = [
        Trajectory(0, k, traj, np.zeros(0), np.zeros(0, np.int64), obs_moments=moments(b, (2,)))
        for k, b in enumerate(batches)
    ]
    learner = Learner(None, jax.random.key(0), -1, None, 1, Replay())  # type: ignore[arg-type]
    start = Progress(None, 0, 0, [], None, initial_stats((2,)))
    progress, _ = learn_round(learner, start, parts, 0)
    want = merge(merge(initial_stats((2,)), moments(batches[0], (2,))), moments(batches[1], (2,)))
    for stats in (given[0], progress.obs_stats):
        np.testing.assert_array_equal(stats.mean, want.mean)
        np.testing.assert_array_equal(stats.var, want.var)
        assert stats.n == want.n


def test_the_replay_learner_normalises_each_sampled_batch_with_the_statistics_given():
    """The replay holds a round's raw observations; every batch the agent learns from is
    those of the slots drawn, normalised by hand with the statistics handed in."""
    config = dqn_config("env.normalize_obs=true", "replay.learning_starts=16")
    envs = make_actor_envs(config)
    try:
        agent = make_host_agent(config, envs[0].spec)
    finally:
        for env in envs:
            env.close()
    drawn: list = []

    def recording(learner, sample, key):
        items = sample.items
        jax.debug.callback(
            lambda *xs: drawn.append([np.asarray(x) for x in xs]),
            sample.indices,
            items.obs,
            items.next_obs,
        )
        return agent.learn(learner, sample, key)

    replay_learner = ReplayLearner(agent._replace(learn=recording), config, envs[0].spec)
    trajectory = random_trajectory(np.random.default_rng(0), 4, 4)
    stats = ObsStats(np.array([1.0, -2.0]), np.array([4.0, 0.25]), np.float64(10.0))
    state = agent.init(jax.random.key(0))
    _, carry, _, learned = replay_learner.learn(
        state, replay_learner.init(), trajectory, 0, jax.random.key(1), stats
    )
    jax.effects_barrier()
    assert learned and len(drawn) == 2  # agent.updates_per_tick
    stored = jax.tree.map(np.asarray, carry.replay.ring.items)
    size = int(carry.replay.ring.size)
    assert size == 8
    # raw in the replay: the trajectory's own observations
    np.testing.assert_array_equal(stored.obs[:size], trajectory.obs[:2].reshape(-1, 2))
    for indices, obs, next_obs in drawn:
        assert np.all(indices < size)
        np.testing.assert_allclose(obs, normalize(stats, stored.obs[indices]), atol=1e-5)
        np.testing.assert_allclose(next_obs, normalize(stats, stored.next_obs[indices]), atol=1e-5)
        assert not np.allclose(obs, stored.obs[indices])  # normalised, not raw


def test_dqn_with_normalised_obs_trains_and_stores_raw_observations():
    """Through `train_host`: the replay holds the corridor's raw observations ([position,
    steps taken], small whole numbers), the statistics count every step acted on."""
    result = bounded(lambda: train_host(dqn_config("env.normalize_obs=true")), 120.0)
    replay = result["replay"].replay
    size = int(replay.ring.size)
    assert size == 10 * 16 - 2 * 4 and result["updates"] == 9
    obs = np.asarray(replay.ring.items.obs)[:size]
    np.testing.assert_array_equal(obs, np.round(obs))
    assert set(np.unique(obs[:, 0])) <= {0.0, 1.0, 2.0} and obs[:, 1].max() >= 2
    assert result["obs_stats"].n == pytest.approx(160 + PRIOR_COUNT)
    assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(result["params"]))
