"""Periodic evaluation of a host-env run (eval.every, `evaluation/host.py`'s HostEvaluation
between `training/host_engine.py`'s rounds): its records and summary fields are a JAX run's,
it leaves training as it was, it gives the numbers `jaxrl-async eval` gives for the same
parameters, and the episodes it plays are the corridor's own (tests/helpers/host_envs.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from jaxrl_async import train
from jaxrl_async.config.loader import load_config
from jaxrl_async.evaluation.host import Players, evaluate_host_run, make_eval_env, play_episodes
from jaxrl_async.evaluation.results import NO_EVAL
from jaxrl_async.host.executor import make_host_agent
from tests.helpers import host_envs
from tests.helpers.host_runs import CORRIDOR, SMALL, dqn_config

EVAL_KEYS = tuple(NO_EVAL)


def corridor(*overrides: str):
    """10 rounds of 16 env steps, records every 2 rounds, lag 1."""
    return load_config(
        "ppo_cartpole",
        [f"env.name={CORRIDOR}", *SMALL, "pipeline.lag=1", "train.total_steps=160", *overrides],
    )


def training_fields(record: dict) -> dict:
    """A record's fields less its eval fields and timings."""
    return {
        k: v for k, v in record.items() if k not in EVAL_KEYS and "seconds" not in k and k != "sps"
    }


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        (math.isnan(a[k]) and math.isnan(b[k])) if a[k] != b[k] else True for k in a
    )


def test_periodic_eval_records_summary_and_training_unchanged(tmp_path):
    plain = train(corridor())
    config = corridor("eval.every=64", "eval.episodes=3")
    run = train(config, run_dir=tmp_path / "run")
    records = _records(run)
    steps = [r["env_steps"] for r in records]
    assert steps == [r["env_steps"] for r in _records(plain)] == [32, 64, 96, 128, 160]
    evaluated = [r["env_steps"] for r in records if r["eval_episodes"] > 0]
    assert evaluated == [64, 128, 160]  # each multiple of 64 passed, and the end
    for r in records:
        if r["env_steps"] in evaluated:
            assert r["eval_episodes"] == 3 and np.isfinite(r["eval_return_mean"])
            assert np.isfinite(r["eval_return_std"]) and 1 <= r["eval_length_mean"] <= 5
        else:
            assert r["eval_episodes"] == 0 and math.isnan(r["eval_return_mean"])
            assert math.isnan(r["eval_length_mean"]) and math.isnan(r["eval_return_std"])
    # training as without evaluation, bit for bit
    for a, b in zip(records, _records(plain)):
        assert same(training_fields(a), training_fields(b)), (a, b)
    assert not any(k in r for r in _records(plain) for k in EVAL_KEYS)

    summary = run.summary
    assert summary["eval_return_mean"] == records[-1]["eval_return_mean"]
    assert summary["eval_seconds"] > 0 and summary["eval_compile_seconds"] > 0
    assert np.isfinite(summary["sps"]) and summary["sps"] > 0
    assert plain.summary["eval_return_mean"] is None
    assert plain.summary["eval_seconds"] == plain.summary["eval_compile_seconds"] == 0.0

    # the final evaluation is `jaxrl-async eval`'s of the final checkpoint
    result = evaluate_host_run(tmp_path / "run", config, None, None, None)
    assert result["env_steps"] == 160 and result["episodes"] == 3
    assert result["return_mean"] == records[-1]["eval_return_mean"]
    assert result["length_mean"] == records[-1]["eval_length_mean"]


def test_eval_off_a_record_boundary_ends_a_record_sampled_and_capped():
    """eval.every=48 falls between records (every 32 steps): the evaluated round ends one,
    as a checkpoint's does; eval.mode=sample and eval.max_steps are honoured."""
    config = corridor("eval.every=48", "eval.episodes=5", "eval.mode=sample", "eval.max_steps=2")
    run = train(config)
    records = _records(run)
    assert [r["env_steps"] for r in records] == [32, 48, 64, 96, 128, 144, 160]
    evaluated = [r for r in records if r["eval_episodes"] > 0]
    assert [r["env_steps"] for r in evaluated] == [48, 96, 144, 160]
    assert all(r["eval_episodes"] == 5 and r["eval_length_mean"] <= 2 for r in evaluated)
    assert run.summary["eval_return_mean"] == evaluated[-1]["eval_return_mean"]


def test_normalised_and_resumed_evaluates_with_the_runs_statistics(tmp_path):
    """Under env.normalize_obs the evaluation sees the learner's statistics of the moment:
    a resumed run's final evaluation is `jaxrl-async eval`'s of its final checkpoint,
    which holds them; the resumed records keep the eval keys."""
    run = tmp_path / "run"
    eval_args = ["env.normalize_obs=true", "eval.every=96", "eval.episodes=2"]
    train(corridor(*eval_args, "train.total_steps=96"), run_dir=run)
    config = corridor(*eval_args)
    resumed = train(config, run_dir=run, resume=True)
    records = _records(resumed)
    assert [r["env_steps"] for r in records] == [32, 64, 96, 128, 160]
    assert [r["env_steps"] for r in records if r["eval_episodes"]] == [96, 160]
    result = evaluate_host_run(run, config, None, None, None)
    assert result["env_steps"] == 160
    assert result["return_mean"] == resumed.summary["eval_return_mean"]
    assert result["return_mean"] == records[-1]["eval_return_mean"]


@pytest.mark.parametrize(
    ("action", "max_steps", "expected"),
    [
        # start 0 or 1 (seeded): 3 - start steps forward, 1 each and the goal's 10
        (host_envs.FORWARD, 0, lambda lengths: (lengths + 10.0, {2, 3})),
        # never moving: the TimeLimit's 5 steps of -0.25
        (host_envs.STAY, 0, lambda lengths: (np.full(4, -1.25), {5})),
        # cut at eval.max_steps: the return so far
        (host_envs.STAY, 2, lambda lengths: (np.full(4, -0.5), {2})),
    ],
)
def test_play_episodes_scores_the_corridor(action, max_steps, expected):
    config = corridor("eval.episodes=4")
    env = make_eval_env(config)
    try:
        agent = make_host_agent(config, env.spec)

        def policy(params, memory, obs, step):
            return None, np.full(4, action, np.int32)

        returns, lengths = play_episodes(Players(env, agent, policy, 0, max_steps), None, None)
    finally:
        env.close()
    want_returns, want_lengths = expected(lengths)
    np.testing.assert_allclose(returns, want_returns)
    assert set(lengths.tolist()) <= want_lengths and len(lengths) == 4


def _records(result) -> list[dict]:
    metrics = result.metrics
    n = len(metrics["env_steps"])
    return [{k: v[i].item() for k, v in metrics.items()} for i in range(n)]


def test_an_off_policy_runs_checkpoint_evaluates_without_its_replay(tmp_path):
    """A DQN run's checkpoint holds its replay too: `eval` restores the learner alone, and
    its numbers are the run's final periodic evaluation's."""
    config = dqn_config("eval.every=64", "eval.episodes=2", rounds=8)
    run = train(config, run_dir=tmp_path / "run")
    final = _records(run)[-1]
    result = evaluate_host_run(tmp_path / "run", config, None, None, None)
    assert result["env_steps"] == config.train.total_steps and result["episodes"] == 2
    assert result["return_mean"] == final["eval_return_mean"]


def test_an_evaluation_env_that_raises_ends_the_run_in_one_resumable_line(tmp_path, monkeypatch):
    """An evaluation env failing mid-run is a RunFailure naming the env, as an actor's env
    failing is: the checkpoints before it stay, and the run resumes from the latest."""
    from jaxrl_async.errors import RunFailure
    from jaxrl_async.evaluation import host as evaluation_host

    def broken(self, params, obs_stats):
        raise RuntimeError("the simulator went away\nmore detail")

    monkeypatch.setattr(evaluation_host.HostEvaluation, "__call__", broken)
    config = corridor("eval.every=64", "checkpoint.every=32")
    with pytest.raises(RunFailure) as failed:
        train(config, run_dir=tmp_path / "run")
    assert str(failed.value) == (
        f"evaluation env {config.env.name} raised RuntimeError: the simulator went away"
    )
    assert failed.value.run_dir == tmp_path / "run"  # the CLI's resume hint
