"""Envs by name beyond gymnax ids: `module.path:factory` (rebuilt from config.yaml by
train, resume and eval) and `envs.register` for notebooks, with `env.kwargs`."""

import json
import textwrap

import pytest

import jaxrl_async
from jaxrl_async import envs
from jaxrl_async.errors import ConfigError

FACTORY_MODULE = textwrap.dedent('''
    import gymnax


    def cartpole(max_steps=500):
        """CartPole with its own episode limit: an (env, params) pair."""
        env, params = gymnax.make("CartPole-v1")
        return env, params.replace(max_steps_in_episode=max_steps)


    class Pendulum:
        """A class is a factory too: it returns an env whose default_params are used."""

        def __new__(cls):
            return gymnax.make("Pendulum-v1")[0]
''')

# No LR annealing: the program does not depend on train.total_steps, so the registered env's
# run, the CLI's run on the same CartPole of 5 steps and its resume to a new total are one
# program, compiled once.
TINY = [
    "env.num_envs=4",
    "pipeline.rollout_len=16",
    "agent.hidden_sizes=[8]",
    "agent.num_minibatches=2",
    "agent.anneal_lr=false",
    "train.log_every=512",
    "train.progress=false",
]


@pytest.fixture
def factory_module(tmp_path, monkeypatch):
    (tmp_path / "my_envs.py").write_text(FACTORY_MODULE)
    monkeypatch.chdir(tmp_path)  # importable from the working directory, as from the CLI
    yield "my_envs"
    import sys

    sys.modules.pop("my_envs", None)


def test_module_factory_with_kwargs_and_a_class_factory(factory_module):
    env, params = envs.make(f"{factory_module}:cartpole", max_steps=7)
    assert params.max_steps_in_episode == 7
    env, params = envs.make(f"{factory_module}:Pendulum")
    assert params is not None and env.action_space(params).shape == (1,)
    with pytest.raises(ConfigError, match="rejected by") as info:
        envs.make(f"{factory_module}:cartpole", nope=1)
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_registered_env_trains_from_its_name(monkeypatch):
    monkeypatch.setattr(envs, "_REGISTERED", {})
    import gymnax

    envs.register(
        "short-cartpole",
        lambda limit: (
            gymnax.make("CartPole-v1")[0],
            gymnax.make("CartPole-v1")[1].replace(max_steps_in_episode=limit),
        ),
    )
    assert "short-cartpole" in envs.registered_envs()
    config = jaxrl_async.load_config(
        "ppo_cartpole",
        TINY + ["env.name=short-cartpole", "env.kwargs.limit=5", "train.total_steps=1024"],
    )
    result = jaxrl_async.train(config)
    # Every episode ends by the limit of 5 steps (CartPole's random policy lasts ~20).
    assert result.metrics["episode_length"].max() <= 5.0
    with pytest.raises(ConfigError, match="gymnax id"):
        envs.register("CartPole-v1", lambda: None)


@pytest.mark.slow  # three fresh processes that compile and train
def test_module_factory_env_trains_is_interrupted_resumes_and_evaluates_through_the_cli(
    cli, tmp_path
):
    """The whole life of a run on a user's env, each step a fresh process that rebuilds the
    env from config.yaml: train, Ctrl-C (checkpoint, exit 130), resume, evaluate."""
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "my_envs.py").write_text(FACTORY_MODULE)
    run = tmp_path / "run"
    common = ["env.name=my_envs:cartpole", "env.kwargs.max_steps=5", "eval.episodes=4"]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jaxrl_async",
            "train",
            "ppo_cartpole",
            *TINY,
            *common,
            "train.total_steps=50000000",
            "--run-dir",
            str(run),
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "my_envs:cartpole" in (run / "config.yaml").read_text()
    stopped = json.loads(metrics.read_text().splitlines()[-1])["env_steps"]

    resumed = cli(
        "resume", str(run), f"train.total_steps={stopped + 1024}", cwd=tmp_path, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    # The resumed run goes on towards the new target (in whole ticks of 64 steps).
    assert stopped < summary["env_steps"] <= stopped + 1024
    assert summary["resumed_from"] == stopped
    evaluated = cli("eval", str(run), cwd=tmp_path, timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    result = json.loads((run / "eval.json").read_text())
    assert result["env_steps"] == summary["env_steps"]
    assert max(result["lengths"]) <= 5, "the factory's kwargs must reach the rebuilt env"


def test_a_suite_that_is_not_installed_names_its_extra(monkeypatch):
    from jaxrl_async.envs import suites

    monkeypatch.setattr(suites, "installed", lambda suite: False)
    with pytest.raises(ConfigError) as info:
        envs.make("craftax:Craftax-Classic-Symbolic-v1")
    assert str(info.value) == (
        "env suite 'craftax' is not installed: pip install 'jaxrl_async[craftax]'"
    )
