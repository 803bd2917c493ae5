"""One typed summary for both engines (`training/summary.py`): a JAX env's run and a host
env's write summary.json from a RunSummary through the one writer, its common fields with
the same meaning, each engine's own fields only on its own runs."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import jax
import pytest

import jaxrl_async
from jaxrl_async.training.summary import HOST_ONLY, JAX_ONLY, RunSummary, summary_fields
from jaxrl_async.training.trainer import train
from tests.helpers.configs import PPO_SMALL
from tests.helpers.host_runs import CORRIDOR, SMALL

ROOT = Path(__file__).resolve().parents[1]
EVAL = ["eval.episodes=2"]
RUNS = {  # (overrides, eval.every)
    "jax": [*PPO_SMALL, "eval.every=2048", *EVAL],
    "host": [f"env.name={CORRIDOR}", *SMALL, "train.total_steps=64", "eval.every=32", *EVAL],
}
COMMON = [f.name for f in dataclasses.fields(RunSummary) if not f.metadata and f.name != "engine"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Per engine: (TrainResult, summary.json, metrics.jsonl's records)."""
    out = {}
    for engine, overrides in RUNS.items():
        run_dir = tmp_path_factory.mktemp(engine) / "run"
        result = train(jaxrl_async.load_config("ppo_cartpole", overrides), run_dir=run_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        out[engine] = result, summary, [json.loads(line) for line in lines]
    return out


@pytest.mark.parametrize("engine", ["jax", "host"])
def test_summary_json_is_the_run_summary_of_its_engine(runs, engine):
    result, summary, _ = runs[engine]
    # The writer's keys: RunSummary's common fields and the engine's own, no other.
    assert list(summary) == summary_fields(engine)
    assert set(summary) <= {f.name for f in dataclasses.fields(RunSummary)}
    assert set(COMMON) <= set(summary)
    other = HOST_ONLY if engine == "jax" else JAX_ONLY
    own = {f.name for f in dataclasses.fields(RunSummary) if f.metadata == other}
    assert not own & set(summary)
    # TrainResult.summary is summary.json's dict; it reads back into the dataclass.
    assert json.loads(json.dumps(result.summary)) == summary
    assert RunSummary(engine=engine, **summary).to_dict() == summary


def test_common_fields_mean_the_same_on_both_engines(runs):
    for engine, (_, s, records) in runs.items():
        last = records[-1]
        assert s["env_steps"] == last["env_steps"] == (4096 if engine == "jax" else 64)
        assert s["updates"] > 0 and s["num_seeds"] == 1 and s["resumed_from"] is None
        assert s["sps"] > 0 and math.isfinite(s["sps"])
        assert math.isfinite(s["final_return"])
        if engine == "jax":  # a host run's: its last env.num_envs episodes' (RunSummary)
            assert s["final_return"] == last["episode_return"]
        assert s["eval_return_mean"] == last["eval_return_mean"]
        assert s["eval_seconds"] > 0 and s["eval_compile_seconds"] > 0
        assert 0 <= s["compile_seconds"] <= s["wall_seconds"]
        assert 0 < s["train_seconds"] <= s["wall_seconds"]
        assert s["checkpoint_seconds"] >= 0
        assert (s["jax_version"], s["processes"]) == (jax.__version__, 1)
        assert s["devices"] and all(isinstance(d, str) for d in s["devices"])
        assert s["placement"] in ("fused", "split")
        assert (s["config"], s["agent"], s["seed"]) == ("ppo_cartpole", "ppo", 0)
        assert s["warnings"] == []
    assert runs["jax"][1]["env"] == "CartPole-v1" and runs["host"][1]["env"] == CORRIDOR
    # The engine's own: a JAX run's compile cache, a host run's executor.
    assert runs["jax"][1]["compile_cache_misses"] >= 0 and runs["jax"][1]["device_choice"]
    assert runs["jax"][1]["final_return_seeds"] is None  # one seed: written as null
    assert runs["host"][1]["actor_threads"] == 1 and runs["host"][1]["policy_lag"] >= 0


def test_closing_lines_of_both_engines():
    fields = dict.fromkeys(COMMON)
    fields.update(config="c", env_steps=4096, wall_seconds=1.25, sps=1234.5, final_return=9.5)
    fields.update(compile_seconds=3.0)
    jax_run = RunSummary(engine="jax", **fields)
    host_run = RunSummary(engine="host", policy_lag=0.5, **fields)
    assert jax_run.closing_line(Path("/r")) == (
        "c: 4,096 steps in 1.2s (compile 3.0s), 1,234 SPS, final return 9.5 -> /r"
    )
    assert dataclasses.replace(host_run, final_return=None).closing_line(None) == (
        "c: 4,096 steps in 1.2s, 1,234 SPS, policy lag 0.50, final return -"
    )


def test_one_writer_of_a_runs_summary():
    """summary.json and the W&B summary are written by training/summary.py's write_summary
    (and, for a sweep's points, by sweeps.py from the group's summary)."""
    writers = set()
    for path in (ROOT / "jaxrl_async").rglob("*.py"):
        text = path.read_text()
        if "rundir.write_summary(" in text or "tracking.finish(" in text:
            writers.add(path.relative_to(ROOT / "jaxrl_async").as_posix())
    assert writers == {"training/summary.py", "training/sweeps.py"}
