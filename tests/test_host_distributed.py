"""A host run over several processes: 2 processes x 1 CPU device against 1 process x 2.

Each process steps its half of the envs (at their global indices) in its own actor
threads and hands its part of every round's batch to the learner's mesh, which spans
both processes' devices (`host/processes.py`); so the two-process run trains what one
process with two learner devices trains. The launches are real subprocesses joined
through `jax.distributed` on 127.0.0.1 (tests/test_distributed.py's launcher), each with
a timeout, so a hang fails the test instead of blocking the suite.
"""

import json
import shutil

import numpy as np
import pytest

from jaxrl_async.config.loader import ConfigError, load_config
from jaxrl_async.host import processes
from tests.test_distributed import _launch, _metrics, _params

STALLING = "gymnasium:tests.helpers.host_envs:HostStalling-v0"
# A host PPO of 5 rounds of 64 steps, observation statistics on (merged over processes).
HOST_PPO = [
    "env.num_envs=4",
    "pipeline.rollout_len=16",
    "agent.hidden_sizes=[16]",
    "agent.num_minibatches=2",
    "agent.num_epochs=2",
    "train.total_steps=320",
    "train.log_every=64",
    "train.progress=false",
    "env.normalize_obs=true",
    "pipeline.devices=2",
    "checkpoint.every=128",
]
CLI = ["-m", "jaxrl_async"]


def _train(run: str, processes: int, root, *extra: str):
    argv = [*CLI, "train", "--run-dir", run, "ppo_gymnasium_cartpole", *HOST_PPO, *extra]
    return _launch(argv, processes, root)


def _ok(procs) -> None:
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-3000:]


def _agree(runs, ref: str, two: str) -> np.ndarray:
    """Both runs ended well and end in the same parameters (the one process's, returned)."""
    _ok(runs[ref] + runs[two])
    one, other = _params(runs["root"] / ref, 320), _params(runs["root"] / two, 320)
    np.testing.assert_allclose(other, one, rtol=0, atol=1e-6)
    return one


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("host_distributed")
    out = {"root": root, "ref": _train("ref", 1, root), "two": _train("two", 2, root)}
    # Both resumed from their checkpoint of 256 steps: the envs restart from the same
    # fresh seeded resets in one process and in two.
    for name, count in (("ref", 1), ("two", 2)):
        shutil.copytree(root / name, root / f"{name}-resumed")
        shutil.rmtree(root / f"{name}-resumed" / "checkpoints" / "320")
        out[f"{name}-resumed"] = _launch([*CLI, "resume", f"{name}-resumed"], count, root)
    # Actor 0 of process 1 (envs 2 and 3) stops answering in round 2.
    stall = [f"env.name={STALLING}", "env.kwargs.hang_at=40", "env.kwargs.hang_seeds_from=2"]
    out["stall"] = _train("stall", 2, root, *stall, "env.stall_seconds=2")
    return out


@pytest.mark.slow  # several processes starting and training: the runs fixture
def test_two_processes_train_what_one_process_with_two_devices_trains(runs):
    root = runs["root"]
    assert np.abs(_agree(runs, "ref", "two")).sum() > 0
    ref, dist = _metrics(root / "ref"), _metrics(root / "two")
    assert (
        [r["env_steps"] for r in dist] == [r["env_steps"] for r in ref] == [64, 128, 192, 256, 320]
    )
    for key in ("loss", "episode_return", "episodes", "param_abs_max"):
        np.testing.assert_allclose([r[key] for r in dist], [r[key] for r in ref], rtol=1e-5)
    summary = json.loads((root / "two" / "summary.json").read_text())
    assert summary["processes"] == 2 and len(summary["devices"]) == 2
    assert summary["env_steps"] == 320 and summary["updates"] == 5


@pytest.mark.slow  # several processes starting and training: the runs fixture
def test_resume_over_two_processes_continues_as_one_process_does(runs):
    root = runs["root"]
    _agree(runs, "ref-resumed", "two-resumed")
    assert [r["env_steps"] for r in _metrics(root / "two-resumed")] == [64, 128, 192, 256, 320]
    summary = json.loads((root / "two-resumed" / "summary.json").read_text())
    assert summary["resumed_from"] == 256 and summary["processes"] == 2


@pytest.mark.slow  # several processes starting and training: the runs fixture
def test_a_stall_in_one_process_ends_both_at_the_same_round(runs):
    zero, one = runs["stall"]
    assert one.returncode == 1 and zero.returncode == 1, zero.stderr[-2000:]
    assert "handed in no round for 2 s" in one.stderr, one.stderr[-2000:]
    assert "another process's actors failed or stalled" in zero.stderr, zero.stderr[-2000:]
    # Rounds 0 and 1 of both processes were whole: both saved nothing later than that.
    records = _metrics(runs["root"] / "stall")
    assert [r["env_steps"] for r in records] == [64, 128]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["pipeline.devices=4"], "learns on all 2 devices (set pipeline.devices=2)"),
        (["pipeline.placement=split"], "pipeline.placement=split runs in one process"),
        (["env.num_envs=6", "pipeline.devices=2"], "env.num_envs=6 does not split over 4"),
        (["pipeline.actor_threads=4"], "pipeline.actor_threads=4 exceeds the 2 envs"),
        (["train.num_seeds=2"], "train.num_seeds > 1 runs in one process"),
    ],
)
def test_what_several_processes_cannot_run_is_one_line(monkeypatch, overrides, message):
    """Checked as if this process were one of 2 (or 4) over 2 devices in all."""
    import jax

    count = 4 if "env.num_envs=6" in overrides else 2
    monkeypatch.setattr(processes, "processes", lambda: count)
    monkeypatch.setattr(jax, "device_count", lambda: 2)
    base = ["env.num_envs=4", "pipeline.devices=2"]
    config = load_config("ppo_gymnasium_cartpole", [*base, *overrides])
    with pytest.raises(ConfigError) as e:
        processes.check_processes(config)
    assert message in str(e.value) and "\n" not in str(e.value)
