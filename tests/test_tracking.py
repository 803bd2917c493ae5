"""Weights & Biases tracking (logger.wandb), offline: the run files W&B writes are read back
(config, every record at its env step, the summary, the run id a resume continues).
Nothing here reaches the network: W&B runs in offline mode, its files in tmp_path."""

import json
import math
import sys

import pytest

import jaxrl_async
from jaxrl_async.config.loader import load_config
from jaxrl_async.errors import ConfigError
from jaxrl_async.run import tracking
from jaxrl_async.run.sinks import RunFileError
from tests.helpers.cli import run_cli_in_process
from tests.helpers.configs import PPO_SMALL, PPO_SWEEP_TINY, SWEEP_GRID
from tests.helpers.faults import fill_disk_at
from tests.helpers.wandb_files import offline as offline_wandb
from tests.helpers.wandb_files import offline_runs, read_run

pytest.importorskip("wandb")

# Offline through W&B's own WANDB_MODE (the `offline` fixture), as its users run it.
OFFLINE = ["logger.wandb=true"]


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
    assert run["config"]["logger"]["wandb_mode"] == ""  # left to WANDB_MODE
    assert run["project"] == tracking.DEFAULT_PROJECT
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


def test_a_resumed_run_continues_where_its_wandb_run_went(tmp_path, offline, monkeypatch):
    """The first session goes to WANDB_PROJECT's project; a resume in a shell without the
    variable continues there (the id is unique within a project), and a config key set
    on the resume still moves it."""
    config, run_dir = _run_dir(tmp_path)
    monkeypatch.setenv("WANDB_PROJECT", "first-project")
    tracking.WandbRun(config.logger, run_dir, group="g")({"env_steps": 100, "loss": 1.0})
    tracking.finish(run_dir, {"env_steps": 100})
    assert json.loads((run_dir / tracking.ID_FILE).read_text())["project"] == "first-project"
    monkeypatch.delenv("WANDB_PROJECT")
    tracking.WandbRun(config.logger, run_dir, group="g")({"env_steps": 200, "loss": 1.0})
    tracking.finish(run_dir, {"env_steps": 200})
    moved = load_config("ppo_cartpole", [*OFFLINE, "logger.wandb_project=moved"]).logger
    tracking.WandbRun(moved, run_dir, group="g")({"env_steps": 300, "loss": 1.0})
    tracking.finish(run_dir, {"env_steps": 300})
    runs = [read_run(p) for p in offline_runs(offline)]
    assert [r["project"] for r in runs] == ["first-project", "first-project", "moved"]
    assert len({r["id"] for r in runs}) == 1


def test_missing_wandb_is_one_line_and_exit_2(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    code, err = run_cli_in_process(
        "train", "ppo_cartpole", *OFFLINE, "--run-dir", str(tmp_path / "run"), cwd=tmp_path
    )
    assert code == 2
    assert err.strip().count("\n") == 0 and "jaxrl_async[wandb]" in err
    assert not (tmp_path / "run").exists()


def test_an_unknown_mode_is_a_config_error(monkeypatch):
    with pytest.raises(ConfigError, match=r"logger\.wandb_mode"):
        load_config("ppo_cartpole", ["logger.wandb_mode=sometimes"])
    monkeypatch.setenv("WANDB_MODE", "sometimes")
    with pytest.raises(ConfigError, match=r"WANDB_MODE must be one of .*got 'sometimes'"):
        load_config("ppo_cartpole", ["logger.wandb=true"])
    # W&B reads the variable even where the config sets the mode: refused all the same.
    with pytest.raises(ConfigError, match=r"WANDB_MODE must be one of"):
        load_config("ppo_cartpole", [*OFFLINE, "logger.wandb_mode=offline"])
    assert load_config("ppo_cartpole", ["logger.wandb_mode=offline"])  # no W&B: no matter


W_AND_B_VARIABLES = {
    "WANDB_PROJECT": "env-project",
    "WANDB_ENTITY": "env-entity",
    "WANDB_RUN_GROUP": "env-group",
    "WANDB_TAGS": "env-a, env-b",
    "WANDB_MODE": "disabled",
}
CONFIG_KEYS = {
    "logger.wandb_project": ("config-project", "project"),
    "logger.wandb_entity": ("config-entity", "entity"),
    "logger.wandb_group": ("config-group", "group"),
    "logger.wandb_tags": ("[config-a]", "tags"),
    "logger.wandb_mode": ("offline", "mode"),
}


def test_unset_keys_are_w_and_b_s_variables_and_set_keys_win():
    def args(overrides=(), environ=None):
        logger = load_config("ppo_cartpole", list(overrides)).logger
        return tracking.wandb_init_args(logger, "the-config", environ or {})

    # Neither: the project's defaults, and W&B's own (None) for entity and tags.
    assert args() == {
        "project": "jaxrl_async",
        "entity": None,
        "group": "the-config",
        "tags": None,
        "mode": "online",
    }
    # Only the variables: each decides its setting.
    assert args(environ=W_AND_B_VARIABLES) == {
        "project": "env-project",
        "entity": "env-entity",
        "group": "env-group",
        "tags": ["env-a", "env-b"],
        "mode": "disabled",
    }
    # Each key set in the config wins over its variable, and leaves the others to theirs.
    for key, (value, arg) in CONFIG_KEYS.items():
        resolved = args([f"{key}={value}"], W_AND_B_VARIABLES)
        expected = args(environ=W_AND_B_VARIABLES)
        expected[arg] = ["config-a"] if arg == "tags" else value
        assert resolved == expected, key


def test_an_offline_run_driven_by_w_and_b_s_variables_alone(tmp_path, offline, monkeypatch):
    for name, value in {**W_AND_B_VARIABLES, "WANDB_MODE": "offline"}.items():
        monkeypatch.setenv(name, value)
    config, run_dir = _run_dir(tmp_path)
    tracking.WandbRun(config.logger, run_dir, group="the-config")({"env_steps": 8, "loss": 1.0})
    tracking.finish(run_dir, {"env_steps": 8})
    (path,) = offline_runs(offline)
    run = read_run(path)
    assert (run["project"], run["entity"]) == ("env-project", "env-entity")
    assert (run["group"], run["tags"]) == ("env-group", ["env-a", "env-b"])


def test_config_keys_win_over_w_and_b_s_variables(tmp_path, offline, monkeypatch):
    # WANDB_MODE=disabled would write nothing: the offline run file is logger.wandb_mode's.
    for name, value in W_AND_B_VARIABLES.items():
        monkeypatch.setenv(name, value)
    overrides = [f"{key}={value}" for key, (value, _) in CONFIG_KEYS.items()]
    config, run_dir = _run_dir(tmp_path, overrides=overrides)
    tracking.WandbRun(config.logger, run_dir, group="the-config")({"env_steps": 8, "loss": 1.0})
    tracking.finish(run_dir, {"env_steps": 8})
    (path,) = offline_runs(offline)
    run = read_run(path)
    assert (run["project"], run["entity"]) == ("config-project", "config-entity")
    assert (run["group"], run["tags"]) == ("config-group", ["config-a"])


def test_the_command_line_runs_offline_under_wandb_mode(tmp_path, offline):
    """`WANDB_MODE=offline jaxrl-async train CONFIG logger.wandb=true`, as W&B users run it."""
    run_dir = tmp_path / "run"
    code, err = run_cli_in_process(
        "train", "ppo_cartpole", *PPO_SMALL, *OFFLINE, "--run-dir", str(run_dir), cwd=tmp_path
    )
    assert code == 0, err
    (path,) = offline_runs(offline)
    run = read_run(path)
    assert run["group"] == "ppo_cartpole" and run["name"] == "run"
    assert (
        run["summary"]["env_steps"]
        == json.loads((run_dir / "summary.json").read_text())["env_steps"]
    )


def test_a_bad_wandb_mode_variable_is_one_line_and_exit_2(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "sometimes")
    code, err = run_cli_in_process(
        "train", "ppo_cartpole", *OFFLINE, "--run-dir", str(tmp_path / "run"), cwd=tmp_path
    )
    assert code == 2
    assert err.strip().count("\n") == 0 and "WANDB_MODE" in err
    assert not (tmp_path / "run").exists()


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


def test_a_wandb_json_that_cannot_be_written_is_one_line(tmp_path, monkeypatch):
    """A full disk when the run keeps its W&B run's id: RunFileError naming the file and
    the OS's reason (the CLI's one line, exit 1), no half-written wandb.json."""
    config, run_dir = _run_dir(tmp_path)
    fill_disk_at(monkeypatch, "wandb.json")
    with pytest.raises(RunFileError, match=r"cannot write .*wandb\.json: No space left"):
        tracking.WandbRun(config.logger, run_dir, group="g")
    assert not (run_dir / tracking.ID_FILE).exists()
