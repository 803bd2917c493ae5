"""An actor's envs in groups whose policy calls overlap each other's env steps
(`pipeline.env_groups`, `host/groups.py`): every env keeps its global index, so a run
with two groups an actor is the run with one, bit for bit: memoryless, recurrent,
off-policy, under observation statistics, at lag 0 and 1, over one or two threads."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxrl_async import load_config, train
from jaxrl_async.errors import ConfigError
from tests.helpers import host_envs  # noqa: F401  (registers the corridor envs)
from tests.helpers.host_runs import CORRIDOR, SMALL, dqn_config


def ppo(*overrides: str):
    return load_config(
        "ppo_cartpole",
        [f"env.name={CORRIDOR}", *SMALL, "env.num_envs=6", "train.total_steps=144", *overrides],
    )


def assert_same_run(a, b) -> None:
    for x, y in zip(jax.tree.leaves(a.state), jax.tree.leaves(b.state), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    for key in ("loss", "episode_return", "episodes"):
        np.testing.assert_array_equal(a.metrics[key], b.metrics[key])


@pytest.mark.parametrize(
    "make",
    [
        lambda *o: ppo("pipeline.lag=0", *o),
        lambda *o: ppo("pipeline.lag=1", "pipeline.actor_threads=2", *o),
        lambda *o: ppo("env.normalize_obs=true", *o),
        lambda *o: ppo("agent.memory=gru", "agent.memory_size=8", "pipeline.lag=1", *o),
        lambda *o: dqn_config("env.num_envs=6", "pipeline.actor_threads=1", *o, rounds=6),
    ],
    ids=["ppo-lag0", "ppo-lag1-2threads", "ppo-normalized", "gru-lag1", "dqn"],
)
def test_two_groups_an_actor_train_what_one_trains(make):
    one, two = train(make("pipeline.env_groups=1")), train(make("pipeline.env_groups=2"))
    assert_same_run(one, two)


def test_more_groups_than_an_actors_envs_is_each_env_its_own():
    """Three groups over two envs an actor: two groups of one env, the same run to float
    rounding (a policy over one env is a matrix-vector product, another kernel than
    over several, so its log-probabilities may differ in the last bit)."""
    base = ("env.num_envs=4", "pipeline.actor_threads=2")
    one, three = train(ppo(*base)), train(ppo(*base, "pipeline.env_groups=3"))
    for x, y in zip(jax.tree.leaves(one.state), jax.tree.leaves(three.state), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-8)
    np.testing.assert_array_equal(one.metrics["episodes"], three.metrics["episodes"])


def test_no_groups_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"pipeline.env_groups must be >= 1, got 0"):
        ppo("pipeline.env_groups=0")


def test_the_summary_breaks_the_policys_time_down():
    """summary.json's actor times: the policy's dispatch is part of it, measured (the
    rest is waiting for its results), beside the env's step, and the actor's whole
    rounds hold both."""
    summary = train(ppo("pipeline.env_groups=2")).summary
    dispatch, policy = summary["actor_dispatch_seconds"], summary["actor_policy_seconds"]
    assert summary["actor_env_seconds"] > 0 and dispatch > 0
    assert dispatch < policy
    assert summary["actor_env_seconds"] + policy < summary["actor_round_seconds"]
