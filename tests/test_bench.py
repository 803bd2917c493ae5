"""Smoke test of `jaxrl-async bench` at the tiniest settings: it runs and reports positive SPS.

Not a benchmark: the numbers are only checked to be positive and finite.
"""

import json
import math
import statistics

import pytest

from jaxrl_async.tools import bench
from jaxrl_async.tools.profile import overlap_bound


@pytest.mark.slow
def test_bench_smoke_writes_positive_sps(tmp_path, capsys):
    out = tmp_path / "bench.json"
    code = bench.main(
        [
            "--envs",
            "4",
            "--repeats",
            "1",
            "--seconds",
            "0.05",
            "--updates",
            "1",
            "--set",
            "agent.hidden_sizes=[8]",
            "--set",
            "pipeline.rollout_len=16",
            "--compile-cache",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    result = json.loads(out.read_text())
    (row,) = result["results"]
    assert row["envs"] == 4
    for part in ("ceiling", "train"):
        (sps,) = row[part]["sps"]
        assert math.isfinite(sps) and sps > 0
    assert row["train"]["updates"] == 1
    assert "| 4 |" in capsys.readouterr().out


def test_bench_rejects_bench_owned_override(capsys):
    assert bench.main(["--envs", "4", "--set", "env.num_envs=8"]) == 2
    assert "set by the bench" in capsys.readouterr().err


def test_scheduler_flag_rewrite():
    flags = "--foo=1 --xla_cpu_enable_concurrency_optimized_scheduler=false"
    assert bench.scheduler_setting(flags) == "false"
    rewritten = bench.with_scheduler(flags, "true")
    assert rewritten == "--foo=1 --xla_cpu_enable_concurrency_optimized_scheduler=true"
    assert bench.scheduler_setting("") is None


@pytest.mark.slow
def test_bench_env_measures_the_env_alone(tmp_path):
    """`--env NAME` adds the env stepped alone under random actions to each row."""
    out = tmp_path / "bench.json"
    code = bench.main(
        [
            "--envs",
            "4",
            "--repeats",
            "1",
            "--seconds",
            "0.05",
            "--updates",
            "1",
            "--env",
            "Acrobot-v1",
            "--set",
            "agent.hidden_sizes=[8]",
            "--set",
            "pipeline.rollout_len=16",
            "--compile-cache",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    result = json.loads(out.read_text())
    assert result["settings"]["env"] == "Acrobot-v1"
    (sps,) = result["results"][0]["env_only"]["sps"]
    assert math.isfinite(sps) and sps > 0
    assert "direct" not in result["results"][0]  # a gymnax id has no suite API to compare


@pytest.mark.slow
def test_profile_times_every_phase_of_an_on_and_an_off_policy_config(tmp_path, capsys):
    """`--profile`: per config one row whose phases were each timed (positive, finite) and
    whose shares are those phases' medians over the tick's; PPO's returns are its
    targets, DQN's the store."""
    out = tmp_path / "profile.json"
    code = bench.main(
        [
            "--profile",
            "--config",
            "ppo_cartpole,dqn_cartpole",
            "--envs",
            "4",
            "--repeats",
            "2",
            "--seconds",
            "0.05",
            "--compile-cache",
            "--set",
            "agent.hidden_sizes=[8]",
            "--set",
            "pipeline.rollout_len=8",
            "--set",
            "replay.learning_starts=64",
            "--set",
            "replay.capacity=1024",
            "--set",
            "replay.batch_size=16",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    rows = json.loads(out.read_text())["profile"]
    assert [r["config"] for r in rows] == ["ppo_cartpole", "dqn_cartpole"]
    assert [r["returns_in"] for r in rows] == ["targets", "store"]
    for r in rows:
        assert r["envs"] == 4 and r["rollout_len"] == 8
        assert set(r["seconds_per_tick"]) == {"tick", "rollout", "learn", "returns"}
        for times in r["seconds_per_tick"].values():
            assert len(times) == 2 and all(math.isfinite(t) and t > 0 for t in times)
        # each share is its phase's median over the tick's (update: learn less returns)
        med = {k: statistics.median(v) for k, v in r["seconds_per_tick"].items()}
        expected = {
            "rollout": med["rollout"],
            "returns": med["returns"],
            "update": med["learn"] - med["returns"],
        }
        for phase, seconds in expected.items():
            assert math.isclose(r["shares"][phase], seconds / med["tick"]), phase
        bound = overlap_bound(med["tick"], med["rollout"], med["learn"])
        assert math.isclose(r["overlap_bound"], bound)
    table = capsys.readouterr().out
    assert "| ppo_cartpole | 4 x 8 | 0 |" in table and "| dqn_cartpole | 4 x 8 | 0 |" in table
    assert "| overlap bound |" in table
    assert f"| {rows[0]['overlap_bound']:.2f}x |" in table


def test_the_overlap_bound_saves_at_most_the_shorter_half():
    assert overlap_bound(1.0, 0.5, 0.5) == 2.0  # equal halves, nothing else: twice as fast
    assert math.isclose(overlap_bound(1.0, 0.25, 0.7), 1 / 0.75)  # the rest stays
    assert overlap_bound(1.0, 0.0, 0.8) == 1.0  # no actor to hide
    assert overlap_bound(1.0, 0.1, 1.2) == 1.0  # the learner alone is longer than the tick
    assert math.isclose(overlap_bound(1.0, 0.5, 0.6), 1 / 0.6)  # the longer half binds


def test_profile_rejects_an_unknown_config(capsys):
    assert bench.main(["--profile", "--config", "ppo_cartpole,nope", "--seconds", "0.05"]) == 2
    assert "nope" in capsys.readouterr().err


def test_bench_overrides_keep_an_off_policy_agents_rollout():
    """PPO's reference rollout and minibatches apply to on-policy configs: an off-policy
    agent's rollout sets its updates per env step, and it has no minibatches."""
    from jaxrl_async.config.loader import load_config

    assert bench.bench_overrides("ppo_cartpole", []) == list(bench.BENCH_OVERRIDES)
    for name in ("sac_pendulum", "td3_pendulum", "dqn_cartpole"):
        kept = bench.bench_overrides(name, [])
        assert kept == ["train.progress=false"], name
        shipped = load_config(name).pipeline.rollout_len
        assert load_config(name, kept).pipeline.rollout_len == shipped, name
