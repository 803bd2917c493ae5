"""Host actors in processes of their own (`pipeline.actor_processes`,
`host/actor_process.py`): the run they train is the threads' run bit for bit (on-policy
over two actors at lag 1 under observation statistics and env groups, recurrent,
off-policy, two seeds side by side, resumed); an id the run's process registered builds
in the children; an env that cannot be built or that fails mid-run ends the run in the
threads' one line, a factory no child can import in one of its own; a stall, a stop and
Ctrl-C end the run and every child within seconds."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxrl_async import resume, train
from jaxrl_async.config.loader import load_config
from jaxrl_async.errors import ConfigError
from jaxrl_async.host import ActorError, train_host
from jaxrl_async.host.stopping import ActorStalled
from tests.helpers import host_envs  # registers the corridor envs
from tests.helpers.cli import ROOT, subprocess_env
from tests.helpers.host_runs import BOUND, CORRIDOR, SMALL, bounded, dqn_config

PROCESSES = "pipeline.actor_processes=true"


def ppo(*overrides: str):
    return load_config(
        "ppo_cartpole",
        [f"env.name={CORRIDOR}", *SMALL, "env.num_envs=6", "train.total_steps=144", *overrides],
    )


def children(pid: int | None = None) -> list[int]:
    """The pids of the live actor processes of process `pid` (default: this one)."""
    pids: list[int] = []
    for task in Path(f"/proc/{pid or os.getpid()}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            pids += [int(p) for p in (task / "children").read_text().split()]
    return [p for p in pids if _alive(p) and _is_actor(p)]


def _is_actor(pid: int) -> bool:
    try:
        return b"jaxrl_async.host.actor_process" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.parametrize(
    "make",
    [
        lambda *o: ppo(
            "pipeline.lag=1",
            "pipeline.actor_threads=2",
            "pipeline.env_groups=2",
            "env.normalize_obs=true",
            *o,
        ),
        lambda *o: ppo("agent.memory=gru", "agent.memory_size=8", "pipeline.lag=1", *o),
        lambda *o: dqn_config("env.num_envs=6", "pipeline.actor_threads=2", *o, rounds=6),
        lambda *o: ppo("train.num_seeds=2", "env.normalize_obs=true", "pipeline.lag=1", *o),
    ],
    ids=["ppo-2actors-lag1-groups-normalized", "gru", "dqn", "2seeds-normalized"],
)
def test_actor_processes_train_what_actor_threads_train(make):
    threads, processes = train(make()), train(make(PROCESSES))
    for x, y in zip(jax.tree.leaves(threads.state), jax.tree.leaves(processes.state), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    for key in ("loss", "episode_return", "episodes"):
        np.testing.assert_array_equal(threads.metrics[key], processes.metrics[key])
    assert not children()


def test_a_resumed_run_of_actor_processes_is_the_threads_resumed_run(tmp_path):
    """A run checkpointed at 48 steps and resumed to 144: the children start at the
    resumed round, from its parameters, with the threads' fresh resets."""
    ends = []
    for processes in ("false", "true"):
        run = tmp_path / processes
        overrides = ["pipeline.lag=1", "train.total_steps=48", "checkpoint.every=24"]
        train(ppo(*overrides, f"pipeline.actor_processes={processes}"), run_dir=run)
        ends.append(resume(run, ["train.total_steps=144"]))
    threads, processes = ends
    assert processes.summary["resumed_from"] == 48 and processes.summary["actor_processes"]
    for x, y in zip(jax.tree.leaves(threads.state), jax.tree.leaves(processes.state), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    np.testing.assert_array_equal(threads.metrics["loss"], processes.metrics["loss"])
    assert not children()


def test_an_id_the_run_registered_builds_in_the_children():
    """`gymnasium:HostCorridor-v0` is registered by a module this process imported, not
    named in the env's name: the children build it from this process's registration."""
    result = train_host(ppo("env.name=gymnasium:HostCorridor-v0", PROCESSES))
    assert result["updates"] == 6 and result["actor_threads"] == 1
    assert not children()


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("gymnasium:NoSuchEnv-v0", "NoSuchEnv-v0"),
        ("gymnasium:tests.helpers.no_such_module:Env-v0", "cannot import"),
    ],
)
def test_an_env_the_child_cannot_build_is_the_threads_config_error(name, line):
    with pytest.raises(ConfigError, match=line) as threads:
        train_host(ppo(f"env.name={name}"))
    with pytest.raises(ConfigError) as processes:
        train_host(ppo(f"env.name={name}", PROCESSES))
    assert str(processes.value) == str(threads.value) and "\n" not in str(processes.value)
    assert not children()


def test_a_factory_no_other_process_can_import_is_refused_in_one_line():
    config = ppo("env.name=gymnasium:CartPole-v1", PROCESSES)
    with pytest.raises(ConfigError, match=r"set pipeline.actor_processes=false$") as e:
        train(config, env=lambda: host_envs.Corridor())
    assert "\n" not in str(e.value) and not children()


def test_an_env_that_fails_mid_run_ends_the_run_in_the_threads_line():
    config = ppo(
        "env.name=gymnasium:tests.helpers.host_envs:HostFaulty-v0",
        "env.kwargs.fail_at=10",
        "train.total_steps=100000",
        "pipeline.actor_threads=2",
        PROCESSES,
    )
    start = time.perf_counter()
    with pytest.raises(ActorError) as e:
        bounded(lambda: train_host(config))
    line = str(e.value)
    assert re.fullmatch(
        r"env gymnasium:tests\.helpers\.host_envs:HostFaulty-v0: actor \d raised "
        r"RuntimeError: corridor broke at step 10",
        line,
    ), line
    assert time.perf_counter() - start < BOUND
    assert not children()


def test_a_stalled_child_ends_the_run_and_is_killed():
    """Actor 1's envs hang at their 40th step in its process, where nothing releases
    them: the stall ends the run in one line saying where the child is stuck (as the
    child marks it), and closing the run kills the child."""
    config = ppo(
        "env.name=gymnasium:tests.helpers.host_envs:HostStalling-v0",
        "env.num_envs=4",
        "pipeline.actor_threads=2",
        "env.kwargs.hang_at=40",
        "env.kwargs.hang_seeds_from=2",
        "env.stall_seconds=2",
        "train.total_steps=100000",
        PROCESSES,
    )
    with pytest.raises(ActorStalled, match=r"^actor 1 .* its env's step has not returned$"):
        bounded(lambda: train_host(config, callbacks=[]), 60)
    assert not children()


def test_a_stop_ends_the_run_and_every_child():
    stop, rounds = threading.Event(), []

    def stop_at_five(record):
        rounds.append(record)
        if len(rounds) == 5:
            stop.set()

    config = ppo("pipeline.actor_threads=2", "train.total_steps=100000", PROCESSES)
    result = bounded(lambda: train_host(config, callbacks=[stop_at_five], stop=stop))
    assert result["stopped_early"] and result["rounds"] == 5
    assert not children()


@pytest.mark.slow
def test_ctrl_c_in_a_terminal_ends_the_run_and_its_children(tmp_path):
    """SIGINT to the run's whole process group, as a terminal's Ctrl-C sends it: the run
    saves and exits 130 within seconds, and no actor process outlives it."""
    run = tmp_path / "run"
    args = [
        "ppo_cartpole",
        f"env.name={CORRIDOR}",
        *SMALL,
        "pipeline.actor_threads=2",
        PROCESSES,
        "train.total_steps=1000000",
        "train.log_every=640",
    ]
    cmd = [sys.executable, "-m", "jaxrl_async", "train", *args, "--run-dir", str(run)]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=subprocess_env(),
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (run / "metrics.jsonl").is_file() or not (run / "metrics.jsonl").read_text():
            assert proc.poll() is None and time.monotonic() < deadline, "no record came"
            time.sleep(0.2)
        actors = children(proc.pid)
        assert len(actors) == 2
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert time.monotonic() - sent < 15
    assert "resume with: " in err.strip().splitlines()[-1]
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in actors) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in actors)


def test_actor_processes_are_refused_for_a_jax_env_in_one_line():
    with pytest.raises(ConfigError, match=r"^pipeline.actor_processes applies to host envs"):
        load_config("ppo_cartpole", [PROCESSES])


@pytest.mark.parametrize("processes", ["false", "true"])
def test_the_cpu_figures_count_what_the_actors_spend_in_threads_or_processes(processes):
    """Two actors whose envs each spend 2 ms of CPU a step: the run's CPU over the rounds
    it times (what its cores_busy and cpu_bound_sps say, `host/round_times.py`) holds at
    least all of theirs, whether the actors are threads of the run's process or processes
    of their own (whose CPU they report with each round)."""
    busy = "gymnasium:tests.helpers.host_envs:HostBusy-v0"
    overrides = ["pipeline.actor_threads=2", "pipeline.lag=1", "train.total_steps=144"]
    overrides += [f"pipeline.actor_processes={processes}", "env.kwargs={cpu_seconds: 0.002}"]
    config = ppo(*overrides, f"env.name={busy}")
    summary = train(config).summary
    cores, batch = summary["cores"], config.batch_size
    assert cores >= 1 and 0 < summary["cores_busy"] <= cores + 0.5
    # The figures time the rounds after the learner's first (its compiles): their CPU.
    cpu = (summary["env_steps"] - batch) * cores / summary["cpu_bound_sps"]
    # At lag 1 the actors step round 1, and may start round 2, before the first ends:
    # rounds 3 on are timed for sure.
    spent = (summary["env_steps"] - 3 * batch) * 0.002
    assert cpu >= spent, (cpu, spent, summary)
    assert not children()
