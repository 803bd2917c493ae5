"""Smoke test of `jaxrl-async bench` at the tiniest settings: it runs and reports positive SPS.

Not a benchmark: the numbers are only checked to be positive and finite.
"""

import json
import math

from jaxrl_async import bench


def test_bench_smoke_writes_positive_sps(tmp_path, capsys):
    out = tmp_path / "bench.json"
    code = bench.main(["--envs", "4", "--repeats", "1", "--seconds", "0.05", "--updates", "1",
                       "--set", "agent.hidden_sizes=[8]", "--set", "pipeline.rollout_len=16",
                       "--compile-cache", "--json", str(out)])
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


def test_bench_env_measures_the_env_alone(tmp_path):
    """`--env NAME` adds the env stepped alone under random actions to each row."""
    out = tmp_path / "bench.json"
    code = bench.main(["--envs", "4", "--repeats", "1", "--seconds", "0.05", "--updates", "1",
                       "--env", "Acrobot-v1", "--set", "agent.hidden_sizes=[8]",
                       "--set", "pipeline.rollout_len=16", "--compile-cache", "--json", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    assert result["settings"]["env"] == "Acrobot-v1"
    (sps,) = result["results"][0]["env_only"]["sps"]
    assert math.isfinite(sps) and sps > 0
    assert "direct" not in result["results"][0]  # a gymnax id has no suite API to compare
