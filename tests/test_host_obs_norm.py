"""Observation normalisation on host envs (`host/obs_norm.py`): the JAX wrapper's
statistics in numpy, what the actor acts on and hands in, and the statistics a run
checkpoints, resumes from and evaluates with."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.config.loader import load_config
from jaxrl_async.envs.wrappers import NormalizeObservation, NormState
from jaxrl_async.errors import ConfigError
from jaxrl_async.evaluation.host import evaluate_host_run
from jaxrl_async.host import make_gymnasium
from jaxrl_async.host.actor import Acting, _obs_moments, rollout
from jaxrl_async.host.obs_norm import (
    PRIOR_COUNT,
    ObsStats,
    from_saved,
    initial_stats,
    merge,
    moments,
    normalize,
)
from jaxrl_async.host.saved import saved_state
from jaxrl_async.run import checkpoint as ckpt
from jaxrl_async.training.host_run import train_host_run
from tests.helpers.host_runs import CORRIDOR, SMALL

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
    seen: list[np.ndarray] = []

    def policy(params, memory, obs, step):
        seen.append(np.asarray(obs))
        return None, np.ones(len(obs), np.int64), {}

    stats = ObsStats(np.array([1.0, 2.0]), np.array([4.0, 0.25]), np.float64(10.0))
    try:
        first = env.reset(0)
        acting = Acting(None, 0, stats)
        _, traj, steps, _ = rollout(env, policy, acting, (first, None), 0, 6)
    finally:
        env.close()
    raw = np.stack([first, *(s.obs for s in steps[:-1])])
    np.testing.assert_allclose(traj.obs, normalize(stats, raw))
    np.testing.assert_allclose(np.stack(seen), traj.obs)
    final = np.stack([s.final_obs for s in steps])
    np.testing.assert_allclose(traj.next_obs, normalize(stats, final))
    reported = _obs_moments(first, steps, acting)
    np.testing.assert_allclose(reported.mean, raw.reshape(-1, 2).mean(0))
    np.testing.assert_allclose(reported.var, raw.reshape(-1, 2).var(0), rtol=1e-6)
    assert reported.n == 18
    assert _obs_moments(first, steps, Acting(None, 0)) is None


def test_a_run_checkpoints_resumes_and_evaluates_with_its_statistics(tmp_path):
    run = tmp_path / "run"
    config = load_config("ppo_cartpole", [*NORMALISED, "train.total_steps=96"])
    state = train_host_run(config, run_dir=run).state
    like = saved_state(state, 0, obs_stats=initial_stats((2,)))
    saved = from_saved(ckpt.restore(run / "checkpoints", like)[0]["obs_stats"])
    # Every observation acted on, 16 per round: the corridor's positions and step counts.
    assert saved.n == pytest.approx(96 + PRIOR_COUNT)
    assert 0.0 < saved.mean[0] < 3.0 and 0.0 < saved.mean[1] < 5.0 and np.all(saved.var > 0)

    longer = load_config("ppo_cartpole", [*NORMALISED, "train.total_steps=160"])
    train_host_run(longer, run_dir=run, resume=True)
    resumed = ckpt.restore(run / "checkpoints", like)[0]["obs_stats"]
    assert from_saved(resumed).n == pytest.approx(160 + PRIOR_COUNT)
    result = evaluate_host_run(run, longer, 2, None, None)
    assert result["episodes"] == 2 and np.all(np.isfinite(result["returns"]))


def test_normalised_observations_with_a_replay_are_refused():
    with pytest.raises(ConfigError, match="normalize_obs is not supported with a replay"):
        load_config("dqn_cartpole", ["env.name=gymnasium:CartPole-v1", "env.normalize_obs=true"])
