"""`train(config, env=...)` with a Gymnasium env (host/by_name.py's `host_config`): a
factory (function, lambda or `gymnasium.Env` class) or an id goes to the host engine with
everything a host run has; a bare instance is refused in one line; config.yaml names what
ran, so that `resume` and `eval` without env= work (an importable factory) or refuse in
one line (a lambda). A JAX env object still goes to the pipeline (tests/test_custom_env.py).
"""

from __future__ import annotations

import json

import gymnasium
import pytest
from gymnasium.wrappers import TimeLimit

from jaxrl_async.config.loader import load_config
from jaxrl_async.errors import ConfigError
from jaxrl_async.host.gymnasium_env import FACTORY_NAMESPACE
from jaxrl_async.host.round_times import ACTOR_TIMES
from jaxrl_async.training.trainer import resume, train
from tests.helpers import host_envs
from tests.helpers.cli import run_cli_in_process
from tests.helpers.host_runs import CORRIDOR, SMALL

# Per-record keys that measure time, not what was learned.
TIMES = ("wall_seconds", "sps", *ACTOR_TIMES)


def corridor(**kwargs) -> gymnasium.Env:
    """HostCorridor-v0 as a factory: importable as tests.test_host_factory:corridor."""
    return TimeLimit(host_envs.Corridor(**kwargs), host_envs.LIMIT)


def small(*overrides: str):
    return load_config("ppo_cartpole", [*SMALL, "train.total_steps=64", *overrides])


def learned(result) -> dict:
    return {k: v for k, v in result.metrics.items() if k not in TIMES}


def config_name(run_dir) -> str:
    return load_config(run_dir / "config.yaml").env.name


def test_a_factory_trains_as_its_registered_id():
    """The same env by a lambda, a module's function, a class and an id string: the
    records of the run by registered id, seed for seed."""
    by_id = learned(train(small(f"env.name={CORRIDOR}")))
    assert by_id["episodes"].sum() > 0
    for env in (
        lambda: TimeLimit(host_envs.Corridor(), host_envs.LIMIT),
        corridor,
        "tests.helpers.host_envs:HostCorridor-v0",
    ):
        got = learned(train(small(), env=env))
        assert got.keys() == by_id.keys()
        for k in by_id:
            assert (got[k] == by_id[k]).all(), (env, k)


def test_env_kwargs_go_to_the_factory():
    result = train(small("env.kwargs={dict_obs: true}"), env=corridor)
    assert result.summary["env"] == "gymnasium:tests.test_host_factory:corridor"


def test_a_gymnasium_env_class_is_a_factory():
    result = train(small(), env=host_envs.Corridor)
    assert result.summary["env"] == "gymnasium:tests.helpers.host_envs:Corridor"


def test_a_bare_instance_is_one_line():
    with pytest.raises(ConfigError, match=r"pass a factory \(env=lambda: Corridor\(...\)\)") as e:
        train(small(), env=host_envs.Corridor())
    assert "\n" not in str(e.value)


def test_a_factory_of_no_gymnasium_env_is_one_line():
    with pytest.raises(ConfigError, match=r"its factory returned int, not a gymnasium\.Env"):
        train(small(), env=lambda: 3)


def test_an_importable_factory_resumes_and_evaluates_without_env(tmp_path):
    run = tmp_path / "run"
    train(small("checkpoint.every=32"), env=corridor, run_dir=run)
    assert config_name(run) == "gymnasium:tests.test_host_factory:corridor"
    code, err = run_cli_in_process("resume", str(run), "total_steps=96", cwd=tmp_path)
    assert code == 0, err
    assert json.loads((run / "summary.json").read_text())["resumed_from"] == 64
    code, err = run_cli_in_process("eval", str(run), "--episodes", "2", cwd=tmp_path)
    assert code == 0, err


def test_a_lambda_resumes_with_env_and_refuses_without(tmp_path):
    """config.yaml names the lambda's id, registered in this process only: passed again,
    the run resumes; in another process (its registration gone), one line."""
    run = tmp_path / "run"
    train(small("checkpoint.every=32"), env=lambda: corridor(), run_dir=run)
    name = config_name(run)
    assert name.startswith(f"gymnasium:{FACTORY_NAMESPACE}/"), name
    result = resume(run, ["train.total_steps=96"], env=lambda: corridor())
    assert result.summary["resumed_from"] == 64
    gymnasium.registry.pop(name.partition(":")[2])  # as in a fresh process
    code, err = run_cli_in_process("eval", str(run), "--episodes", "2", cwd=tmp_path)
    assert code == 2 and "pass it again as env=" in err and err.count("\n") == 1, err


def test_host_config_decides_the_engine():
    """A JAX env object (and no env) stays with the pipeline; an id names the host env."""
    from jaxrl_async.envs import make
    from jaxrl_async.host.by_name import host_config

    config = small()
    jax_env, _ = make("CartPole-v1")
    assert host_config(config, None) is None and host_config(config, jax_env) is None
    assert host_config(config, "CartPole-v1").env.name == "gymnasium:CartPole-v1"
    assert host_config(config, "envpool:CartPole-v1").env.name == "envpool:CartPole-v1"
    # A JAX env's name belongs in env.name, not env=: refused, not run as a Gymnasium id.
    for name in ("gymnax:CartPole-v1", "brax:ant"):
        with pytest.raises(ConfigError, match=f"env='{name}' names a JAX env"):
            host_config(config, name)
