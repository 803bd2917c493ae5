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

TINY = ["env.num_envs=4", "pipeline.rollout_len=16", "agent.hidden_sizes=[8]",
        "agent.num_minibatches=2", "train.log_every=512", "train.progress=false"]


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


def test_registered_env_trains_from_its_name(monkeypatch):
    monkeypatch.setattr(envs, "_REGISTERED", {})
    import gymnax

    envs.register("short-cartpole", lambda limit: (
        gymnax.make("CartPole-v1")[0],
        gymnax.make("CartPole-v1")[1].replace(max_steps_in_episode=limit)))
    assert "short-cartpole" in envs.registered_envs()
    config = jaxrl_async.load_config("ppo_cartpole", TINY + [
        "env.name=short-cartpole", "env.kwargs.limit=5", "train.total_steps=1024"])
    result = jaxrl_async.train(config)
    # Every episode ends by the limit of 5 steps (CartPole's random policy lasts ~20).
    assert result.metrics["episode_length"].max() <= 5.0
    with pytest.raises(ConfigError, match="gymnax id"):
        envs.register("CartPole-v1", lambda: None)


@pytest.mark.slow  # three fresh processes that compile and train
def test_module_factory_env_trains_resumes_and_evaluates_through_the_cli(cli, tmp_path):
    (tmp_path / "my_envs.py").write_text(FACTORY_MODULE)
    run = tmp_path / "run"
    common = ["env.name=my_envs:cartpole", "env.kwargs.max_steps=30", "eval.every=1024",
              "eval.episodes=4"]
    first = cli("train", "ppo_cartpole", *TINY, *common, "train.total_steps=1024",
                "--run-dir", str(run), cwd=tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "my_envs:cartpole" in (run / "config.yaml").read_text()
    resumed = cli("resume", str(run), "train.total_steps=2048", cwd=tmp_path, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 2048 and summary["resumed_from"] == 1024
    evaluated = cli("eval", str(run), cwd=tmp_path, timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    result = json.loads((run / "eval.json").read_text())
    assert result["env_steps"] == 2048
    assert max(result["lengths"]) <= 30, "the factory's kwargs must reach the rebuilt env"
