"""Several processes as one mesh: 2 processes x 1 CPU device against 1 process x 2 devices.

The multi-process runs are real: subprocesses join through `jax.distributed` on
127.0.0.1 (JAX's default CPU collectives, gloo, need nothing installed). Every launch
has a timeout, so a hang fails the test instead of blocking the suite.
"""

import json
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from jaxrl_async.config.loader import ConfigError, load_config
from jaxrl_async.run import distributed
from tests.helpers.cli import subprocess_env

TIMEOUT = 420  # seconds for one launch (all its processes); a hang fails the test

# PPO and DQN as test_multidevice trains them on 2 of its 4 forced devices (the progress
# bar and checkpoints live on the host), so the one-process references load its programs
# from the persistent compile cache when that file ran first.
PPO = [
    "env.num_envs=8",
    "pipeline.rollout_len=16",
    "agent.hidden_sizes=[16]",
    "agent.num_minibatches=2",
    "agent.num_epochs=2",
    "train.total_steps=1024",
    "train.log_every=256",
    "env.normalize_obs=true",
    "train.prng=philox4x32",
    "pipeline.devices=2",
    "checkpoint.every=512",
]  # the progress bar on: only process 0 may show it
DQN = [
    "env.num_envs=4",
    "pipeline.rollout_len=4",
    "agent.hidden_sizes=[16]",
    "agent.n_step=2",
    "agent.updates_per_tick=2",
    "replay.capacity=128",
    "replay.batch_size=16",
    "replay.learning_starts=64",
    "train.total_steps=1024",
    "train.log_every=256",
    "train.progress=false",
    "train.prng=philox4x32",
    "pipeline.devices=2",
]

# The Python API in one process of a job: join, load, train, gather the state whole.
API = textwrap.dedent("""
    import json, sys
    from jaxrl_async.run import distributed  # first: imports jaxrl_async, which sets XLA flags

    name, *overrides = sys.argv[1:]
    distributed.initialize(name, overrides)  # before any other JAX call
    import jax, numpy as np
    from jax.flatten_util import ravel_pytree
    import jaxrl_async

    result = jaxrl_async.train(jaxrl_async.load_config(name, overrides))
    state = distributed.gather(result.state)  # a collective: every process calls it
    out = {"process": jax.process_index(), "processes": jax.process_count(),
           "params": np.asarray(ravel_pytree(state.learner.params)[0]).tolist(),
           "loss": result.metrics["loss"].tolist(),
           "return": result.metrics["episode_return"].tolist(),
           "devices": result.summary["devices"]}
    if state.replay is not None:
        out["replay_sizes"] = np.asarray(state.replay.ring.size).tolist()
    print("RESULT " + json.dumps(out))
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(processes: int) -> dict:
    """One process: 4 forced devices (the runs use 2), test_multidevice's flags, which are
    part of the compile cache's key. Several: one device each. The repository root on
    the path, so a run can name the test envs (`tests.helpers.host_envs`)."""
    return subprocess_env(1 if processes > 1 else 4, JAX_PLATFORMS="cpu")


def _launch(argv: list[str], processes: int, cwd: Path) -> list[subprocess.CompletedProcess]:
    """Start `processes` copies of `python argv... distributed.*=...` (one CPU device each)
    and wait for all of them; kill them all if they outlast TIMEOUT."""
    port = _free_port()
    procs = []
    for i in range(processes):
        launch = (
            []
            if processes == 1
            else [
                f"distributed.coordinator=127.0.0.1:{port}",
                f"distributed.num_processes={processes}",
                f"distributed.process_id={i}",
                "distributed.timeout=120",
            ]
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, *argv, *launch],
                cwd=cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=_env(processes),
            )
        )
    done = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=TIMEOUT)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        pytest.fail(f"a {processes}-process launch of {argv[:4]} hung for {TIMEOUT}s")
    return done


def _result(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


def _checkpoint(run_dir: Path, step: int) -> tuple[dict, dict]:
    """(the stored arrays as nested dicts, the leaf records) of one checkpoint."""
    import orbax.checkpoint as ocp

    where = (run_dir / "checkpoints" / str(step)).absolute()
    arrays = ocp.PyTreeCheckpointer().restore(where / "state")
    return arrays, json.loads((where / "meta" / "metadata").read_text())["leaves"]


def _params(run_dir: Path, step: int) -> np.ndarray:
    from jax.flatten_util import ravel_pytree

    return np.asarray(ravel_pytree(_checkpoint(run_dir, step)[0]["learner"]["params"])[0])


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("distributed")
    cli = ["-m", "jaxrl_async"]
    out = {"root": root}
    # One process, two forced devices: the reference.
    ref = _launch([*cli, "train", "--run-dir", "ref", "ppo_cartpole", *PPO], 1, root)
    assert ref[0].returncode == 0, ref[0].stderr[-3000:]
    out["dqn_ref"] = _result(_launch(["-c", API, "dqn_cartpole", *DQN], 1, root)[0])
    # Two processes, one device each, through the command line.
    out["ppo"] = _launch([*cli, "train", "--run-dir", "two", "ppo_cartpole", *PPO], 2, root)
    # The same again into the now non-empty run directory: both refuse.
    out["refused"] = _launch([*cli, "train", "--run-dir", "two", "ppo_cartpole", *PPO], 2, root)
    # Resume the two-process run from its periodic checkpoint (the final one removed).
    shutil.copytree(root / "two", root / "two-full")
    shutil.rmtree(root / "two" / "checkpoints" / "1024")
    out["resume"] = _launch([*cli, "resume", "two"], 2, root)
    # DQN over two processes through the Python API: one replay per process.
    out["dqn"] = [_result(p) for p in _launch(["-c", API, "dqn_cartpole", *DQN], 2, root)]
    return out


@pytest.mark.slow  # several processes compiling and training: the runs fixture
def test_two_processes_give_the_parameters_of_one_process_with_two_devices(runs):
    root = runs["root"]
    for proc in runs["ppo"]:
        assert proc.returncode == 0, proc.stderr[-3000:]
    one, two = _params(root / "ref", 1024), _params(root / "two", 1024)
    np.testing.assert_allclose(two, one, rtol=0, atol=1e-5)
    assert np.abs(one).sum() > 0
    ref, dist = _metrics(root / "ref"), _metrics(root / "two")
    assert [r["env_steps"] for r in dist] == [r["env_steps"] for r in ref]
    np.testing.assert_allclose(
        [r["loss"] for r in dist], [r["loss"] for r in ref], rtol=1e-4, atol=1e-6
    )
    np.testing.assert_allclose(
        [r["episode_return"] for r in dist], [r["episode_return"] for r in ref], rtol=1e-5
    )
    summary = json.loads((root / "two" / "summary.json").read_text())
    assert summary["processes"] == 2 and len(summary["devices"]) == 2


@pytest.mark.slow  # several processes compiling and training: the runs fixture
def test_only_process_zero_writes_and_prints(runs):
    root = runs["root"]
    zero, one = runs["ppo"]
    assert "SPS" in zero.stdout + zero.stderr and "ppo_cartpole:" in zero.stderr
    assert "SPS" not in one.stdout + one.stderr and "ppo_cartpole" not in one.stderr
    files = sorted(p.name for p in (root / "two-full").iterdir())
    assert len([f for f in files if f.startswith("events.out.tfevents")]) == 1
    assert {"config.yaml", "metrics.jsonl", "summary.json", "checkpoints"} <= set(files)
    assert len(_metrics(root / "two-full")) == 4  # one writer: one record per log point
    assert "distributed" not in (root / "two-full" / "config.yaml").read_text()


@pytest.mark.slow  # several processes compiling and training: the runs fixture
def test_both_processes_refuse_a_run_directory_that_is_not_empty(runs):
    for proc in runs["refused"]:
        assert proc.returncode == 2, proc.stderr[-3000:]
        assert "exists and is not empty" in proc.stderr


@pytest.mark.slow  # several processes compiling and training: the runs fixture
def test_resume_across_processes_ends_in_the_uninterrupted_state(runs):
    root = runs["root"]
    for proc in runs["resume"]:
        assert proc.returncode == 0, proc.stderr[-3000:]
    _, resumed = _checkpoint(root / "two", 1024)
    _, full = _checkpoint(root / "two-full", 1024)
    assert resumed.keys() == full.keys()
    assert {k: v["crc32"] for k, v in resumed.items()} == {
        k: v["crc32"] for k, v in full.items()
    }  # every array bit for bit
    assert [r["env_steps"] for r in _metrics(root / "two")] == [256, 512, 768, 1024]
    assert json.loads((root / "two" / "summary.json").read_text())["resumed_from"] == 512


@pytest.mark.slow  # several processes compiling and training: the runs fixture
def test_dqn_keeps_one_replay_per_process(runs):
    zero, one = runs["dqn"]
    ref = runs["dqn_ref"]
    assert zero["processes"] == 2 and len(zero["devices"]) == 2
    assert zero["params"] == one["params"]  # one program, replicated parameters
    sizes = zero["replay_sizes"]
    assert len(sizes) == 2 and min(sizes) > 0 and sizes == ref["replay_sizes"]
    np.testing.assert_allclose(zero["loss"], ref["loss"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(zero["params"], ref["params"], rtol=0, atol=1e-5)


def test_settings_come_from_the_config_then_the_environment():
    env = {
        "JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234",
        "JAX_NUM_PROCESSES": "4",
        "JAX_PROCESS_ID": "3",
    }
    s = distributed.settings(None, [], environ=env)
    assert (s.coordinator, s.num_processes, s.process_id) == ("10.0.0.1:1234", 4, 3)
    s = distributed.settings(
        None,
        [
            "distributed.process_id=1",
            "distributed.num_processes=2",
            "distributed.coordinator=host:9",
        ],
        environ=env,
    )
    assert (s.coordinator, s.num_processes, s.process_id) == ("host:9", 2, 1)
    s = distributed.settings("ppo_cartpole", [], environ={})
    assert (s.coordinator, s.num_processes, s.process_id) == ("", 1, 0)
    # One process: nothing to join, JAX untouched.
    assert distributed.initialize("ppo_cartpole", [], environ={}).num_processes == 1


@pytest.mark.parametrize(
    "overrides, environ, message",
    [
        (["distributed.num_processes=2"], {}, "need distributed.coordinator"),
        (
            [
                "distributed.num_processes=2",
                "distributed.process_id=2",
                "distributed.coordinator=h:1",
            ],
            {},
            "process_id=2 is not in [0, 2)",
        ),
        (["distributed.coordinator=nohostport"], {}, "HOST:PORT"),
        (["distributed.num_processes=-1"], {}, "distributed.num_processes"),
        ([], {"JAX_NUM_PROCESSES": "two"}, "$JAX_NUM_PROCESSES must be an integer"),
    ],
)
def test_bad_settings_are_one_line_config_errors(overrides, environ, message):
    with pytest.raises(ConfigError) as e:
        distributed.settings(None, overrides, environ=environ)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_launch_settings_stay_out_of_the_run_config():
    config = load_config(
        "ppo_cartpole", ["distributed.coordinator=h:1", "distributed.num_processes=2"]
    )
    assert config.distributed.num_processes == 2
    assert "distributed" not in config.to_yaml()
