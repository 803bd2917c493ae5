"""The XLA flags `import jaxrl_async` sets: the CPU scheduler off, one CPU device per core."""

import json
import os
import subprocess
import sys

import pytest

from jaxrl_async import _xla_flags


@pytest.mark.parametrize(
    "given, cores, expected",
    [
        (
            None,
            2,
            "--xla_cpu_enable_concurrency_optimized_scheduler=false "
            "--xla_force_host_platform_device_count=2",
        ),
        (
            "--foo=1",
            64,
            "--foo=1 --xla_cpu_enable_concurrency_optimized_scheduler=false "
            "--xla_force_host_platform_device_count=8",
        ),
        # one core: nothing to split; the user's own settings win
        (None, 1, "--xla_cpu_enable_concurrency_optimized_scheduler=false"),
        (
            "--xla_force_host_platform_device_count=3 "
            "--xla_cpu_enable_concurrency_optimized_scheduler=true",
            2,
            "--xla_force_host_platform_device_count=3 "
            "--xla_cpu_enable_concurrency_optimized_scheduler=true",
        ),
    ],
)
def test_flags_are_added_only_where_xla_flags_says_nothing(monkeypatch, given, cores, expected):
    monkeypatch.delenv("JAXRL_ASYNC_KEEP_XLA_FLAGS", raising=False)
    if given is None:
        monkeypatch.delenv("XLA_FLAGS", raising=False)
    else:
        monkeypatch.setenv("XLA_FLAGS", given)
    monkeypatch.setattr(_xla_flags, "cpu_cores", lambda: cores)
    _xla_flags.apply_default_xla_flags()
    assert os.environ["XLA_FLAGS"] == expected


def test_keep_leaves_xla_flags_alone(monkeypatch):
    monkeypatch.setenv("JAXRL_ASYNC_KEEP_XLA_FLAGS", "1")
    monkeypatch.setenv("XLA_FLAGS", "--foo=1")
    _xla_flags.apply_default_xla_flags()
    assert os.environ["XLA_FLAGS"] == "--foo=1"


def test_a_fresh_process_gets_one_cpu_device_per_core_and_runs_choose_from_them():
    """Without the suite's one-device pin (conftest): the default a user gets."""
    script = (
        "import json, jax, jaxrl_async\n"
        "print(json.dumps({'devices': jax.local_device_count(), 'choice': {\n"
        "    name: jaxrl_async.choose_layout(jaxrl_async.load_config(name)).devices\n"
        "    for name in ('dqn_cartpole', 'r2d2_cartpole_masked',\n"
        "                 'ppo_breakout_minatar')}}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    cores = min(_xla_flags.cpu_cores(), _xla_flags.MAX_CPU_DEVICES)
    assert out["devices"] == cores
    # R2D2's 8 envs and batch of 16 sequences split over 2 cores or more; the memoryless
    # DQN and the 256-wide PPO stay on one device
    choice = out.pop("choice")
    assert (choice.pop("r2d2_cartpole_masked") > 1) == (cores > 1)
    assert choice == {"dqn_cartpole": 1, "ppo_breakout_minatar": 1}


def test_the_suite_runs_on_one_device_and_subprocesses_force_their_own():
    """conftest pins this process to one CPU device and adds no compile-time flag, so a test
    compiles what a user's run compiles; a forced-device subprocess gets its count only."""
    import jax

    from tests.helpers.cli import subprocess_env

    assert jax.local_device_count() == 1
    flags = os.environ["XLA_FLAGS"].split()
    assert not [f for f in flags if "optimization_level" in f or "fusion_emitters" in f]
    assert subprocess_env(devices=2)["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"


@pytest.mark.parametrize("given, host_expected", [(None, False), ("true", True)])
def test_a_host_run_computes_inline_on_the_cpu_unless_the_environment_says(given, host_expected):
    """A JAX-env run keeps JAX's async dispatch; a host run turns it off as it starts
    (before JAX makes its CPU client), unless JAX_CPU_ENABLE_ASYNC_DISPATCH chooses."""
    script = (
        "import jax, jaxrl_async\n"
        "from jaxrl_async.host import train_host\n"
        "read = lambda: jax.config.read('jax_cpu_enable_async_dispatch')\n"
        "steps = ['train.total_steps=2048', 'train.progress=false']\n"
        "jaxrl_async.train(jaxrl_async.load_config('ppo_cartpole', steps))\n"
        "jax_run = read()\n"
        "train_host(jaxrl_async.load_config('ppo_gymnasium_cartpole', steps))\n"
        "print(jax_run, read())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != _xla_flags.ASYNC_DISPATCH_VAR}
    env.pop("JAXRL_ASYNC_KEEP_XLA_FLAGS", None)
    if given is not None:
        env[_xla_flags.ASYNC_DISPATCH_VAR] = given
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == f"True {host_expected}"
