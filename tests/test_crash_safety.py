"""Crash safety: every `resume with:` hint works when followed, a save that cannot write
ends the run on one line with the previous checkpoint intact, and runs killed at random
moments resume to the uninterrupted run's state."""

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import jaxrl_async
from jaxrl_async.errors import TrainingInterrupted
from jaxrl_async.run import checkpoint, rundir
from tests.helpers.cli import run_cli_in_process, subprocess_env
from tests.helpers.configs import DQN_TINY, PPO_SMALL
from tests.helpers.faults import all_finite, fail_saves_after, fill_disk_at, stored_arrays
from tests.helpers.resume import assert_same_records, interrupt_at, records

# PPO_SMALL's programs in two host calls of 1,024 steps.
SHORT = [*PPO_SMALL, "train.total_steps=2048"]


def test_resume_finishes_a_run_stopped_after_its_last_checkpoint(tmp_path):
    """Ctrl-C during the last host call: the run saves its end and says to resume; the
    resume has nothing to train and finishes the run (summary.json, exit 0)."""
    config = jaxrl_async.load_config("ppo_cartpole", SHORT)
    run_dir = tmp_path / "run"
    # The record of the first of two calls is logged while the second runs.
    with pytest.raises(TrainingInterrupted) as stopped:
        jaxrl_async.train(config, run_dir=run_dir, callbacks=[interrupt_at(1024)])
    assert stopped.value.run_dir == run_dir  # the CLI's hint: jaxrl-async resume RUN_DIR
    assert checkpoint.steps(run_dir / "checkpoints")[-1] == 2048
    assert not (run_dir / "summary.json").exists()

    code, err = run_cli_in_process("resume", str(run_dir), cwd=tmp_path)
    assert code == 0, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 2048 and summary["resumed_from"] == 2048
    assert [r["env_steps"] for r in records(run_dir)] == [1024, 2048]
    assert summary["final_return"] == records(run_dir)[-1]["episode_return"]
    # Finished now: another resume has nothing to do.
    code, err = run_cli_in_process("resume", str(run_dir), cwd=tmp_path)
    assert code == 2 and "nothing to resume" in err and "is finished at 2,048" in err


@pytest.mark.parametrize("kind", ["disk_full", pytest.param("read_only", marks=pytest.mark.slow)])
def test_a_save_that_cannot_write_ends_the_run_on_one_line(tmp_path, monkeypatch, kind):
    """The second save (the last) fails: one line, exit 1, the first checkpoint intact, and
    the printed resume command finishes the run once saves work again."""
    run_dir = tmp_path / "run"
    with monkeypatch.context() as patches:
        fail_saves_after(patches, 1024, kind)
        code, err = run_cli_in_process(
            "train",
            *SHORT,
            "checkpoint.every=1024",
            "checkpoint.keep=1",
            "--run-dir",
            str(run_dir),
            cwd=tmp_path,
        )
    assert code == 1
    [line] = err.splitlines()
    assert line.startswith(
        f"jaxrl-async: error: cannot write checkpoint {run_dir}/checkpoints/2048: "
    )
    assert line.endswith(
        f"({run_dir}/checkpoints/1024 is intact); resume with: jaxrl-async resume {run_dir}"
    )
    assert checkpoint.steps(run_dir / "checkpoints") == [1024]
    assert all_finite(stored_arrays(run_dir / "checkpoints", 1024))
    code, err = run_cli_in_process(
        *line.split("resume with: jaxrl-async ")[1].split(), cwd=tmp_path
    )
    assert code == 0, err
    assert checkpoint.steps(run_dir / "checkpoints") == [2048]


# Two log points, a checkpoint at each: a JAX env's run, and a host env's (actor threads).
TWO_POINTS = {
    "jax": [*SHORT, "checkpoint.every=1024", "checkpoint.keep=1"],
    "host": [
        "ppo_gymnasium_cartpole",
        "env.num_envs=4",
        "pipeline.rollout_len=8",
        "agent.hidden_sizes=[8]",
        "agent.num_minibatches=2",
        "train.total_steps=64",
        "train.log_every=32",
        "train.progress=false",
        "checkpoint.every=32",
        "checkpoint.keep=1",
    ],
}


@pytest.mark.parametrize("name", ["metrics.jsonl", "summary.json"])
@pytest.mark.parametrize("engine", ["jax", "host"])
def test_a_log_file_that_cannot_be_written_ends_the_run_on_one_line(
    tmp_path, monkeypatch, engine, name
):
    """The disk fills while writing the second record of metrics.jsonl (the checkpoint of
    the first log point is whole) or summary.json (the last checkpoint is whole): one line
    naming the file and the intact checkpoint, exit 1, no half-written summary.json, and
    the printed resume command finishes the run (a JAX env's as the uninterrupted one)."""
    if engine == "host":
        pytest.importorskip("gymnasium")
    run_dir, args = tmp_path / "run", TWO_POINTS[engine]
    steps = [1024, 2048] if engine == "jax" else [32, 64]
    with monkeypatch.context() as patches:
        fill_disk_at(patches, name, writes=1)
        code, err = run_cli_in_process("train", *args, "--run-dir", str(run_dir), cwd=tmp_path)
    assert code == 1, err
    [line] = err.splitlines()
    intact = steps[0] if name == "metrics.jsonl" else steps[1]
    assert line == (
        f"jaxrl-async: error: cannot write {run_dir / name}: No space left on device "
        f"({run_dir}/checkpoints/{intact} is intact); resume with: jaxrl-async resume {run_dir}"
    )
    assert checkpoint.steps(run_dir / "checkpoints") == [intact]
    assert not (run_dir / "summary.json").exists() and not list(run_dir.glob("*.tmp"))
    assert [r["env_steps"] for r in records(run_dir)] == [s for s in steps if s <= intact]

    code, err = run_cli_in_process(
        *line.split("resume with: jaxrl-async ")[1].split(), cwd=tmp_path
    )
    assert code == 0, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == steps[1] and summary["resumed_from"] == intact
    assert [r["env_steps"] for r in records(run_dir)] == steps
    if engine == "jax":  # a host run's resume starts its simulators afresh: not bitwise
        whole = tmp_path / "whole"
        code, err = run_cli_in_process("train", *args, "--run-dir", str(whole), cwd=tmp_path)
        assert code == 0, err
        assert_same_records(records(run_dir), records(whole))


# Tiny runs of eight host calls, each call checkpointed.
KILLED_RUNS = {
    "ppo": ["ppo_cartpole", *PPO_SMALL, "train.log_every=512", "checkpoint.every=512"],
    "dqn": ["dqn_cartpole", *DQN_TINY, "train.log_every=128", "checkpoint.every=128"],
}
KILLS_PER_RUN = 3
PAUSE = 0.3  # seconds each save stays half written (tests/helpers/faults.py)


def _kill_at_random(command: list[str], run_dir, rng: random.Random, calls_left: int):
    """Start `jaxrl-async COMMAND` with slow saves and SIGKILL it at a moment drawn from
    `rng`: while it starts (import, compile, restore), inside its k-th save, or just after
    it. Returns where it was killed, or None if it finished first (exit 0)."""
    marker = run_dir.with_suffix(".saves")
    marker.write_text("")
    first = not (run_dir / "checkpoints").exists()  # killed only once a checkpoint is whole
    # The first kill of a run lands inside a save, so every run resumes past a half-written one.
    modes = ["start"] if not calls_left else ["save", "after save"] + ([] if first else ["start"])
    mode = "save" if first and calls_left else rng.choice(modes)
    k = rng.randint(2 if first else 1, max(2 if first else 1, min(3, calls_left)))
    args = [sys.executable, "-m", "tests.helpers.faults", str(PAUSE), str(marker), *command]
    with (run_dir.parent / "stderr").open("w") as err:
        proc = subprocess.Popen(args, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=err)
    if mode == "start":
        delay = rng.uniform(0.0, 2.5)
    else:
        while proc.poll() is None and _lines(marker) < k:
            time.sleep(0.005)
        delay = rng.uniform(0.0, PAUSE) if mode == "save" else PAUSE + rng.uniform(0.0, 0.3)
    try:
        proc.wait(delay)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        # The save it was in, if its temporary directory is still there, half written.
        saving = [Path(line).parent for line in marker.read_text().splitlines()[-1:]]
        inside = [p.name.split(".")[0] for p in saving if p.exists()]
        when = "while starting" if mode == "start" else f"{mode} {k}"
        return when + "".join(f" (inside the save at {s} steps)" for s in inside)
    assert proc.returncode == 0, (run_dir.parent / "stderr").read_text()[-2000:]
    return None


def _lines(path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.slow
def test_runs_killed_at_random_moments_resume_to_the_uninterrupted_state(tmp_path):
    """SIGKILL at seeded random moments, in saves among them, then resume, three times a
    run: each resume succeeds and the run ends in the uninterrupted run's checkpoint,
    every array bitwise, and its metrics records."""
    rng, kills = random.Random(35), []
    for name, args in KILLED_RUNS.items():
        whole, run_dir = tmp_path / f"{name}-whole", tmp_path / name
        code, err = run_cli_in_process("train", *args, "--run-dir", str(whole), cwd=tmp_path)
        assert code == 0, err
        [final] = checkpoint.steps(whole / "checkpoints")[-1:]
        command, killed = ["train", *args, "--run-dir", str(run_dir)], []
        while len(killed) < KILLS_PER_RUN:
            done = checkpoint.steps(run_dir / "checkpoints")
            calls_left = 8 - 8 * (done[-1] if done else 0) // final
            where = _kill_at_random(command, run_dir, rng, calls_left)
            if where is None:
                break
            killed.append(where)
            command = ["resume", str(run_dir)]
        if not rundir.finished(run_dir, final):
            code, err = run_cli_in_process("resume", str(run_dir), cwd=tmp_path)
            assert code == 0, err
        kills += [f"{name}: {k}" for k in killed]
        assert any("inside the save" in k for k in killed), killed
        assert checkpoint.steps(run_dir / "checkpoints")[-1] == final
        for a, b in zip(
            stored_arrays(run_dir / "checkpoints", final),
            stored_arrays(whole / "checkpoints", final),
            strict=True,
        ):
            np.testing.assert_array_equal(a, b)
        assert_same_records(records(run_dir), records(whole))
    assert len(kills) >= 2 * KILLS_PER_RUN, kills


@pytest.mark.slow
def test_a_sweep_whose_save_fails_resumes_from_the_hint(tmp_path, monkeypatch):
    """A sweep's group fails at its second save: the hint names the sweep directory, and
    following it finishes the sweep."""
    sweep_dir = tmp_path / "sweep"
    grid = ["agent.learning_rate=[1e-3,3e-3]", "checkpoint.every=1024"]
    with monkeypatch.context() as patches:
        fail_saves_after(patches, 1024, "disk_full")
        code, err = run_cli_in_process(
            "sweep", "ppo_cartpole", *SHORT, *grid, "--sweep-dir", str(sweep_dir), cwd=tmp_path
        )
    assert code == 1
    [line] = err.splitlines()
    assert line.endswith(f"; resume with: jaxrl-async resume {sweep_dir}")
    code, err = run_cli_in_process(
        *line.split("resume with: jaxrl-async ")[1].split(), cwd=tmp_path
    )
    assert code == 0, err
    assert len(json.loads((sweep_dir / "sweep.json").read_text())["points"]) == 2


def test_a_save_failing_behind_a_failed_log_write_still_names_the_run_to_resume(
    tmp_path, monkeypatch
):
    """The disk fills while the save at 2,048 is written in the background and the third
    record is written: the save's failure, raised as the run ends, is the line, and it
    names the intact checkpoint at 1,024 and the resume that continues from it."""
    run_dir = tmp_path / "run"
    args = [*PPO_SMALL, "train.total_steps=3072", "checkpoint.every=1024", "checkpoint.keep=1"]
    with monkeypatch.context() as patches:
        fail_saves_after(patches, 1024, "disk_full")
        fill_disk_at(patches, "metrics.jsonl", writes=2)
        code, err = run_cli_in_process("train", *args, "--run-dir", str(run_dir), cwd=tmp_path)
    assert code == 1
    [line] = err.splitlines()
    assert f"({run_dir}/checkpoints/1024 is intact)" in line
    assert line.endswith(f"; resume with: jaxrl-async resume {run_dir}")
    code, err = run_cli_in_process(
        *line.split("resume with: jaxrl-async ")[1].split(), cwd=tmp_path
    )
    assert code == 0, err
    assert [r["env_steps"] for r in records(run_dir)] == [1024, 2048, 3072]


@pytest.mark.parametrize("host", [False, True], ids=["jax", "host"])
def test_a_run_directory_that_cannot_be_made_is_one_line(tmp_path, host):
    """--run-dir through a file: exit 2, one line naming the directory and the OS's
    reason, before anything trains."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    env = ["env.name=gymnasium:CartPole-v1"] if host else []
    code, err = run_cli_in_process(
        "train",
        "ppo_cartpole",
        *env,
        "train.total_steps=1024",
        "--run-dir",
        str(blocker / "run"),
        cwd=tmp_path,
    )
    assert code == 2 and err.count("\n") == 1, err
    assert f"cannot write run directory {blocker / 'run'}: Not a directory" in err
