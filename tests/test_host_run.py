"""Host-env runs from the command line (`training/host_engine.py`, `evaluation/host.py`): a run
directory as for a JAX env (config, metrics.jsonl, TensorBoard, checkpoints, summary),
resume that continues the counts from an exact learner state, eval, refusals before
anything is written, an env that fails mid-run, and Ctrl-C.

The runs step the tiny corridor of tests/helpers/host_envs.py, named as a user names their
own env: `gymnasium:<module>:<id>`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import jax
import numpy as np
import pytest

from jaxrl_async import train
from jaxrl_async.config.loader import load_config
from jaxrl_async.run import checkpoint as ckpt
from tests.helpers import host_envs
from tests.helpers.cli import ROOT, run_cli_in_process, subprocess_env
from tests.helpers.host_runs import CORRIDOR, SMALL

FAULTY = "gymnasium:tests.helpers.host_envs:HostFaulty-v0"
STALLING = "gymnasium:tests.helpers.host_envs:HostStalling-v0"


def corridor_args(*overrides: str) -> list[str]:
    """16 env steps a round; records every 2 rounds."""
    return ["ppo_cartpole", f"env.name={CORRIDOR}", *SMALL, *overrides]


def records(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_run_resume_and_eval_from_the_command_line(tmp_path):
    run = tmp_path / "run"
    args = corridor_args("train.total_steps=160", "checkpoint.every=64")
    code, err = run_cli_in_process("train", *args, "--run-dir", str(run), cwd=tmp_path)
    assert code == 0, err
    assert {p.name for p in run.iterdir()} >= {"config.yaml", "metrics.jsonl", "summary.json"}
    assert any(p.name.startswith("events.out.tfevents") for p in run.iterdir())
    assert [r["env_steps"] for r in records(run)] == [32, 64, 96, 128, 160]
    assert ckpt.steps(run / "checkpoints")[-1] == 160
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["env_steps"], summary["updates"], summary["actor_threads"]) == (160, 10, 1)

    code, err = run_cli_in_process("resume", str(run), "total_steps=256", cwd=tmp_path)
    assert code == 0, err
    assert [r["env_steps"] for r in records(run)] == [32, 64, 96, 128, 160, 192, 224, 256]
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["resumed_from"], summary["updates"]) == (160, 16)

    code, err = run_cli_in_process("eval", str(run), "--episodes", "3", cwd=tmp_path)
    assert code == 0, err
    result = json.loads((run / "eval.json").read_text())
    assert result["episodes"] == 3 and result["env_steps"] == 256
    assert all(np.isfinite(result["returns"])) and all(n >= 1 for n in result["lengths"])


def test_checkpoint_holds_the_exact_learner_state(tmp_path):
    """The learner state restored from a run's last checkpoint equals the state the run
    ended with, leaf for leaf, and its update count is the run's."""
    config = load_config("ppo_cartpole", [*corridor_args()[1:], "train.total_steps=96"])
    result = train(config, run_dir=tmp_path / "run")
    like = {"learner": result.state, "updates": np.zeros((), np.int64)}
    restored, _ = ckpt.restore(tmp_path / "run" / "checkpoints", like)
    assert int(restored["updates"]) == result.summary["updates"] == 6
    for a, b in zip(jax.tree.leaves(restored["learner"]), jax.tree.leaves(result.state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["eval.every=64", "eval.video=true"], "eval.video is not supported"),
        (["pipeline.actor_threads=8"], "exceeds env.num_envs=4"),
        (["env.stall_seconds=-1"], "env.stall_seconds must be >= 0"),
    ],
)
def test_refused_before_anything_is_written(tmp_path, overrides, match):
    run = tmp_path / "run"
    code, err = run_cli_in_process(
        "train", *corridor_args(*overrides), "--run-dir", str(run), cwd=tmp_path
    )
    assert code == 2 and match in err and err.count("\n") == 1, err
    assert not run.exists()


def test_sweep_of_a_host_env_from_the_command_line(tmp_path):
    """Two learning rates x two seeds on a host env: one program of four runs, each point
    with its own directory, records and summary, and sweep.json ranks them."""
    sweep_dir = tmp_path / "sweep"
    code, err = run_cli_in_process(
        "sweep",
        *corridor_args(
            "agent.learning_rate=[1e-4,1e-3]", "train.num_seeds=2", "train.total_steps=160"
        ),
        "--sweep-dir",
        str(sweep_dir),
        cwd=tmp_path,
    )
    assert code == 0, err
    points = json.loads((sweep_dir / "sweep.json").read_text())["points"]
    assert len(points) == 2
    for point in points:
        assert len(point["final_return_seeds"]) == 2
        assert records(sweep_dir / point["run_dir"])[-1]["env_steps"] == 160


def test_env_failure_ends_the_run_in_one_line_and_keeps_the_checkpoint(tmp_path):
    run = tmp_path / "run"
    args = [
        "ppo_cartpole",
        f"env.name={FAULTY}",
        *SMALL,
        "env.kwargs.fail_at=100",  # an env's 100th step: round 25 (4 steps a round)
        "checkpoint.every=64",
        "train.total_steps=100000",
    ]
    code, err = run_cli_in_process("train", *args, "--run-dir", str(run), cwd=tmp_path)
    assert code == 1, err
    assert err.count("\n") == 1 and "actor 0 raised RuntimeError: corridor broke" in err, err
    assert f"resume with: jaxrl-async resume {run}" in err
    assert ckpt.steps(run / "checkpoints")[-1] == 384  # the last boundary before it broke
    assert not (run / "summary.json").exists()


@pytest.fixture
def release_hangs():
    """Ends the hangs of the Stalling envs a test left behind, once it is done."""
    yield
    host_envs.RELEASE.set()
    for thread in threading.enumerate():
        if thread.name.startswith("host-actor"):
            thread.join(10)
    host_envs.RELEASE.clear()


def test_stalled_env_ends_the_run_in_one_line_and_the_hint_resumes(tmp_path, release_hangs):
    """The envs of actor 1 stop answering at their 40th step (round 10): after half of
    env.stall_seconds a warning, after all of it one line naming the actor, its env and
    the call it is stuck in, exit 1, without waiting for the stuck thread (left behind);
    the checkpoint before stays, and the printed `resume with:` command finishes the run
    (the resumed run's fresh envs do not reach a 40th step)."""
    run = tmp_path / "run"
    args = [
        "ppo_cartpole",
        f"env.name={STALLING}",
        *SMALL,
        "pipeline.actor_threads=2",
        "env.kwargs.hang_at=40",
        "env.kwargs.hang_seeds_from=2",  # envs 2 and 3: actor 1's
        "env.stall_seconds=2",
        "checkpoint.every=64",
        "train.total_steps=256",
    ]
    started = time.monotonic()
    code, err = run_cli_in_process("train", *args, "--run-dir", str(run), cwd=tmp_path)
    assert code == 1, err
    assert time.monotonic() - started < 60
    warning, line = err.strip().splitlines()
    assert warning.startswith(f"warning: actor 1 ({STALLING}) handed in no round for 1"), err
    assert line == (
        f"jaxrl-async: error: actor 1 ({STALLING}) handed in no round for 2 s "
        f"(env.stall_seconds): its env's step has not returned; "
        f"resume with: jaxrl-async resume {run}"
    )
    assert "host-actor-1" in [t.name for t in threading.enumerate()]  # still in its step
    assert ckpt.steps(run / "checkpoints")[-1] == 128  # rounds 0-8 done, 8 saved
    assert not (run / "summary.json").exists()

    hint = line.split("resume with: ", 1)[1].split()
    assert hint[:2] == ["jaxrl-async", "resume"]
    code, err = run_cli_in_process(*hint[1:], cwd=tmp_path)
    assert code == 0, err
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["resumed_from"], summary["env_steps"]) == (128, 256)


def test_envs_lists_gymnasium_ids(capsys):
    from jaxrl_async import cli

    assert cli.main(["envs", "gymnasium"]) == 0
    out = capsys.readouterr().out
    assert "env.name=gymnasium:<id>" in out and "CartPole-v1" in out


@pytest.mark.slow
def test_ctrl_c_saves_exits_130_and_the_hint_resumes(tmp_path):
    """SIGINT mid-run: the run saves and exits 130 within seconds, every actor thread
    ended, and the printed `resume with:` command finishes the run."""
    run = tmp_path / "run"
    # The first record comes at 640 of the 16,000 steps: the signal lands with most of the
    # run left, which the resume trains.
    args = corridor_args("train.total_steps=16000", "train.log_every=640")
    cmd = [sys.executable, "-m", "jaxrl_async", "train", *args, "--run-dir", str(run)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=subprocess_env(), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (run / "metrics.jsonl").is_file() or not records(run):
            assert proc.poll() is None and time.monotonic() < deadline, "no record came"
            time.sleep(0.2)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert time.monotonic() - sent < 15
    hint = err.strip().splitlines()[-1].split("resume with: ", 1)[1]
    saved = ckpt.steps(run / "checkpoints")[-1]
    assert 0 < saved < 16000
    done = subprocess.run(
        [sys.executable, "-m", "jaxrl_async", *hint.split()[1:]],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["resumed_from"] == saved and summary["env_steps"] == 16000


@pytest.mark.slow
def test_ppo_learns_a_users_own_gymnasium_env_named_by_module_and_id():
    """PPO on the corridor, the user's own `gymnasium.Env` (`gymnasium:<module>:<id>`),
    three seeds one after another: every seed ends walking straight to the goal (a
    return of 12 or 13, by the start cell), which a random walk (STAY half the time,
    cut at 5 steps, averages about 8) never keeps up over 8 episodes."""
    from tests.helpers.host_envs import GOAL_BONUS

    finals = []
    for seed in range(3):
        config = load_config(
            "ppo_cartpole",
            [f"env.name={CORRIDOR}", "env.num_envs=8", "pipeline.rollout_len=16"]
            + ["agent.hidden_sizes=[16]", "agent.learning_rate=3e-3", "train.progress=false"]
            + ["train.total_steps=8192", f"train.seed={seed}"],
        )
        finals.append(train(config).summary["final_return"])
    assert min(finals) >= GOAL_BONUS + 2.0, finals


def test_bench_profile_of_a_host_config_times_both_sides():
    """`bench --profile` on a host config: the executor's own times a round (actor env
    step and policy, its dispatch among it, the actor's whole round holding both, learner
    learn and wait), each positive, the overlap bound, the SPS against the env's own
    random loop measured beside each run (far faster than training: no policy, no
    learner), and the CPU: the cores the run kept busy, and its CPU bound, which no
    faster run can pass (above what it reached)."""
    from jaxrl_async.tools.host_profile import host_table, profile_host

    config = load_config("ppo_cartpole", [*corridor_args()[1:], "pipeline.lag=1"])
    row = profile_host(config, rounds=4, repeats=2)
    assert len(row["sps"]) == 2 and all(s > 0 for s in row["sps"])
    per_round = row["seconds_per_round"]
    for key in ("actor_env", "actor_policy", "actor_dispatch", "actor_round", "learn"):
        assert all(t > 0 for t in per_round[key]), key
    assert all(d < p for d, p in zip(per_round["actor_dispatch"], per_round["actor_policy"]))
    parts = zip(per_round["actor_env"], per_round["actor_policy"], per_round["actor_round"])
    assert all(env + policy < whole for env, policy, whole in parts)
    assert 1.0 <= row["overlap_bound"] <= 2.0
    assert len(row["random_loop_sps"]) == 2 and all(0 < x < 1 for x in row["of_random_loop"])
    assert all(0 < busy <= row["cores"] + 0.5 for busy in row["cores_busy"])
    bounds = zip(row["of_random_loop"], row["cpu_bound_of_random_loop"], row["cores_busy"])
    # the CPU bound over what the run reached is the cores over those it kept busy
    for reached, bound, busy in bounds:
        assert bound == pytest.approx(reached * row["cores"] / busy, rel=0.05)
    table = host_table([row])
    assert "| ppo_cartpole | 4 x 4 | 1 | 1 actor thread |" in table
    assert f"of {row['cores']} |" in table
