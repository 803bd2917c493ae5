"""Weights & Biases tracking (logger.wandb), offline: the run files W&B writes are read back
(config, every record at its env step, the summary, the run id a resume continues).
Nothing here reaches the network: W&B runs in offline mode, its files in tmp_path."""

import json
import math
import sys

import pytest

import jaxrl_async
from jaxrl_async import tracking
from jaxrl_async.config import load_config
from jaxrl_async.errors import ConfigError
from tests.helpers.cli import run_cli_in_process
from tests.helpers.configs import PPO_SMALL, PPO_SWEEP_TINY, SWEEP_GRID
from tests.helpers.wandb_files import offline as offline_wandb
from tests.helpers.wandb_files import offline_runs, read_run

pytest.importorskip("wandb")

OFFLINE = ["logger.wandb=true", "logger.wandb_mode=offline"]


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    """W&B offline and quiet, its files under tmp_path/wandb, nothing sent anywhere."""
    return offline_wandb(monkeypatch, tmp_path / "wandb")


def _run_dir(tmp_path, name="run", overrides=()):
    config = load_config("ppo_cartpole", [*OFFLINE, *overrides])
    run_dir = tmp_path / name
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(config.to_yaml())
    return config, run_dir


def test_a_run_uploads_its_config_records_at_their_env_steps_and_summary(tmp_path, offline):
    config, run_dir = _run_dir(tmp_path, overrides=["logger.wandb_tags=[a,b]"])
    sink = tracking.WandbRun(config.logger, run_dir, group="g")
    records = [
        {"env_steps": 128 * k, "episode_return": 10.0 + k, "loss": 0.5 / k} for k in (1, 2, 3)
    ]
    records[1]["episode_return"] = math.nan  # no episode ended: not logged
    for record in records:
        sink(record)
    sink.close()
    tracking.finish(run_dir, {"final_return": 13.0, "config": "ppo_cartpole"})

    (path,) = offline_runs(offline)
    run = read_run(path)
    assert run["id"] == json.loads((run_dir / tracking.ID_FILE).read_text())["id"]
    assert (run["group"], run["name"], run["tags"]) == ("g", "run", ["a", "b"])
    assert run["config"]["agent"]["learning_rate"] == config.agent.learning_rate
    assert run["config"]["logger"]["wandb_mode"] == "offline"
    assert [h["env_steps"] for h in run["history"]] == [128, 256, 384]
    assert [h.get("episode_return") for h in run["history"]] == [11.0, None, 13.0]
    assert [h["loss"] for h in run["history"]] == [0.5, 0.25, 0.5 / 3]
    assert run["summary"]["final_return"] == 13.0
    assert run["summary"]["config"] == "ppo_cartpole"


def test_a_reopened_run_directory_continues_its_wandb_run(tmp_path, offline):
    config, run_dir = _run_dir(tmp_path)
    for step in (100, 200):  # two sessions of one run
        tracking.WandbRun(config.logger, run_dir, group="g")({"env_steps": step, "loss": 1.0})
        tracking.finish(run_dir, {"env_steps": step})
    first, second = (read_run(p) for p in offline_runs(offline))
    assert first["id"] == second["id"]
    assert [h["env_steps"] for h in first["history"] + second["history"]] == [100, 200]


def test_missing_wandb_is_one_line_and_exit_2(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    code, err = run_cli_in_process(
        "train", "ppo_cartpole", *OFFLINE, "--run-dir", str(tmp_path / "run"), cwd=tmp_path
    )
    assert code == 2
    assert err.strip().count("\n") == 0 and "jaxrl_async[wandb]" in err
    assert not (tmp_path / "run").exists()


def test_an_unknown_mode_is_a_config_error():
    with pytest.raises(ConfigError, match=r"logger\.wandb_mode"):
        load_config("ppo_cartpole", ["logger.wandb_mode=sometimes"])


@pytest.mark.slow  # trains and resumes a small run of 3 seeds
def test_a_multi_seed_run_and_its_resume_are_one_wandb_run(tmp_path, offline):
    overrides = [*PPO_SMALL, "train.num_seeds=3", *OFFLINE]
    config = load_config("ppo_cartpole", overrides)
    run_dir = tmp_path / "run"
    jaxrl_async.train(config, run_dir=run_dir)
    jaxrl_async.resume(run_dir, ["train.total_steps=5120"])

    first, second = (read_run(p) for p in offline_runs(offline))
    assert first["id"] == second["id"] and first["group"] == "ppo_cartpole"
    assert first["config"]["train"]["num_seeds"] == 3
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    logged = first["history"] + second["history"]
    assert [h["env_steps"] for h in logged] == [r["env_steps"] for r in records]
    for h, r in zip(logged, records):
        for seed in range(3):
            assert h[f"episode_return/seed{seed}"] == pytest.approx(r[f"episode_return/seed{seed}"])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert second["summary"]["final_return_seeds"] == pytest.approx(summary["final_return_seeds"])
    assert second["summary"]["resumed_from"] == 4096 and first["summary"]["env_steps"] == 4096


@pytest.mark.slow  # trains test_sweep's 2 x 2 grid (its compiled program)
def test_each_sweep_point_is_one_wandb_run_in_the_sweeps_group(tmp_path, offline):
    config = load_config("ppo_cartpole", [*PPO_SWEEP_TINY, *OFFLINE])
    result = jaxrl_async.sweep(config, SWEEP_GRID, sweep_dir=tmp_path / "s")
    runs = [read_run(p) for p in offline_runs(offline)]
    assert len(runs) == len(result.points) == 4
    assert {r["group"] for r in runs} == {"s"}
    by_name = {r["name"]: r for r in runs}
    for point, summary, records in zip(result.points, result.summaries, result.records):
        run = by_name[point["run_dir"]]
        assert run["config"]["agent"]["learning_rate"] == point["overrides"]["agent.learning_rate"]
        assert [h["env_steps"] for h in run["history"]] == [r["env_steps"] for r in records]
        assert run["summary"]["final_return_seeds"] == pytest.approx(summary["final_return_seeds"])
