"""Config loading in process, and bad input through the CLI: in process for every case, and
through the real `python -m jaxrl_async` command for a few."""

import dataclasses

import pytest

from jaxrl_async import Config, ConfigError, load_config
from tests.helpers.cli import run_cli_in_process

# ---------------------------------------------------------------------------------------------
# Bad input on the command line: exit 2, one line on stderr, no traceback, nothing written.

BAD_YAML = "env:\n  name: [CartPole-v1\n  num_envs: 4\n"

BAD_INPUTS = [
    pytest.param(
        ["train", "no_such_config"], "unknown config 'no_such_config'", id="unknown-config"
    ),
    pytest.param(
        ["train", "ppo_cartpole", "optim.lr=0.1"],
        "unknown config section 'optim'",
        id="unknown-section",
    ),
    pytest.param(["train", "agent.foo=1"], "agent.foo", id="unknown-key"),
    pytest.param(["train", "env.name=Nope-v0"], "Nope-v0", id="unknown-env"),
    pytest.param(["train", "agent.name=nope"], "unknown agent 'nope'", id="unknown-agent"),
    pytest.param(["train", "train.total_steps=abc"], "train.total_steps", id="malformed-value"),
    pytest.param(
        ["train", "ppo_cartpole", "env.num_envs"],
        "malformed override",
        id="override-without-equals",
    ),
    pytest.param(
        ["train", "ppo_cartpole", "num_envs=8"], "malformed override", id="override-without-section"
    ),
    pytest.param(
        ["train", "agent.learning_rate=-0.001"], "agent.learning_rate", id="negative-learning-rate"
    ),
    pytest.param(["train", "env.num_envs=0"], "env.num_envs", id="zero-envs"),
    pytest.param(
        ["train", "env.num_envs=4", "pipeline.rollout_len=128", "agent.num_minibatches=3"],
        "num_minibatches",
        id="minibatches-do-not-divide",
    ),
    pytest.param(["train", "bad.yaml"], "bad.yaml", id="yaml-syntax-error"),
    pytest.param(["train", "missing.yaml"], "missing.yaml", id="missing-yaml"),
    pytest.param(
        ["train", "env.name=no_such_module_xyz:make"],
        "cannot import",
        id="env-factory-does-not-import",
    ),
    pytest.param(
        ["train", "env.name=os:no_such_factory"],
        "has no 'no_such_factory'",
        id="env-factory-missing",
    ),
    pytest.param(
        ["train", "env.name=os:getcwd"], "not a gymnax-API env", id="env-factory-returns-no-env"
    ),
    pytest.param(
        ["train", "env.kwargs.nope=1"], "rejected by 'CartPole-v1'", id="env-kwargs-rejected"
    ),
    pytest.param(
        ["train", "env.name=brax:no_such_robot"],
        "unknown brax env 'no_such_robot'",
        id="unknown-suite-id",
    ),
    pytest.param(
        ["train", "env.name=navix:Navix-Empty-5x5-v0", "env.kwargs.nope=1"],
        "nope",
        id="suite-kwargs-rejected",
    ),
    pytest.param(
        ["train", "env.name=nosuite:x"], "not a suite (brax, jumanji", id="unknown-suite-prefix"
    ),
    pytest.param(
        ["train", "env.name=jumanji:Snake-v1", "env.normalize_obs=true"],
        "normalize_obs=true needs an array observation",
        id="normalize-dict-obs",
    ),
    pytest.param(["train", "agent.torso=cnn"], "torso=cnn needs an image", id="cnn-on-a-vector"),
    # Checked when the run's layout is chosen (the config itself asks no device).
    pytest.param(
        ["train", "pipeline.devices=8"],
        "pipeline.devices=8 but only 1 local",
        id="more-devices-than-the-machine",
    ),
]


def _tree(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def _assert_one_line_exit_2(code, stderr, mentions):
    assert code == 2, (code, stderr[-2000:])
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("jaxrl-async: error: ")
    assert mentions in lines[0]


@pytest.mark.parametrize("args, mentions", BAD_INPUTS)
def test_cli_bad_input_exits_2_with_one_line(tmp_path, args, mentions):
    (tmp_path / "bad.yaml").write_text(BAD_YAML)
    before = _tree(tmp_path)
    _assert_one_line_exit_2(*run_cli_in_process(*args, cwd=tmp_path), mentions)
    assert _tree(tmp_path) == before  # in particular no runs/ directory


# The same through the real command, for a case of each kind: the config, its file, the env.
@pytest.mark.parametrize(
    "args, mentions",
    [p for p in BAD_INPUTS if p.id in ("unknown-key", "yaml-syntax-error", "unknown-suite-id")],
)
def test_the_command_exits_2_with_one_line(cli, tmp_path, args, mentions):
    (tmp_path / "bad.yaml").write_text(BAD_YAML)
    before = _tree(tmp_path)
    result = cli(*args, cwd=tmp_path, timeout=120)
    _assert_one_line_exit_2(result.returncode, result.stderr, mentions)
    assert _tree(tmp_path) == before


# ---------------------------------------------------------------------------------------------
# load_config in process


def test_overrides_apply_with_their_types():
    config = load_config(
        "ppo_cartpole",
        [
            "agent.hidden_sizes=[32,32]",
            "train.total_steps=5e5",
            "env.num_envs=8",
            "agent.learning_rate=1e-3",
            "env.normalize_obs=true",
            "pipeline.rollout_len=64",
        ],
    )
    assert config.agent.hidden_sizes == (32, 32)
    assert type(config.agent.hidden_sizes) is tuple
    assert config.train.total_steps == 500_000 and type(config.train.total_steps) is int
    assert config.env.num_envs == 8 and type(config.env.num_envs) is int
    assert config.agent.learning_rate == 1e-3 and type(config.agent.learning_rate) is float
    assert config.env.normalize_obs is True
    assert config.batch_size == 8 * 64
    assert config.num_updates == 500_000 // (8 * 64)
    # Untouched values come from the shipped file.
    assert config.name == "ppo_cartpole"
    assert config.env.name == "CartPole-v1"
    assert config.agent.gamma == 0.99


def test_default_config_is_ppo_cartpole():
    config = load_config()
    assert isinstance(config, Config)
    assert config.agent.name == "ppo"
    assert config.agent.hidden_sizes == (64, 64)
    assert (config.env.num_envs, config.pipeline.rollout_len) == (4, 128)
    assert config.train.total_steps == 500_000


def test_config_is_frozen():
    config = load_config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.name = "other"
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.train.total_steps = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.agent.learning_rate = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.env.num_envs = 2


def test_to_yaml_round_trips_through_load_config(tmp_path):
    config = load_config(
        "ppo_cartpole",
        [
            "agent.hidden_sizes=[16,8]",
            "train.total_steps=8192",
            "env.num_envs=2",
            "agent.gae_lambda=0.9",
            "pipeline.rollout_len=32",
            "train.seed=7",
        ],
    )
    path = tmp_path / "resolved.yaml"
    path.write_text(config.to_yaml())
    again = load_config(path)
    assert again == config
    assert again.agent.hidden_sizes == (16, 8)


@pytest.mark.parametrize(
    "overrides",
    [
        ["agent.foo=1"],
        ["optim.lr=1"],
        ["train.total_steps=abc"],
        ["agent.learning_rate=-1"],
        ["env.num_envs=0"],
        ["agent.num_minibatches=3"],
        ["train.total_steps=100"],
    ],
)
def test_load_config_raises_config_error(overrides):
    with pytest.raises(ConfigError) as info:
        load_config("ppo_cartpole", overrides)
    assert "\n" not in str(info.value)


def test_loading_a_config_imports_no_jax_network_optimizer_or_agent_module():
    """A config is a plain value: every shipped config loads and validates without JAX,
    flax, optax or the algorithms' modules (the run imports them when it builds), and
    without asking for a device (`layout.choose_layout` does, once per run)."""
    import subprocess
    import sys

    code = (
        "import sys, jaxrl_async\n"
        "from jaxrl_async.config.loader import available_configs\n"
        "for name in available_configs():\n"
        "    jaxrl_async.load_config(name)\n"
        "allowed = ('jaxrl_async.config.agents', 'jaxrl_async.config.agent',\n"
        "           'jaxrl_async.config.replay_agents')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'flax', 'optax')\n"
        "             or m.startswith('jaxrl_async.agents.') and m not in allowed))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert out.strip() == "[]", out


def test_activation_names_match_the_networks():
    from jaxrl_async.config.agents import ACTIVATION_NAMES
    from jaxrl_async.nn.networks import ACTIVATIONS

    assert sorted(ACTIVATIONS) == sorted(ACTIVATION_NAMES)


@pytest.mark.parametrize(
    "platform, name, overrides, devices, why",
    [
        # off CPU: the row and env-step thresholds for every learner
        # 4 envs x 128 steps / 4 minibatches = 128 samples a gradient step, 512 steps a tick
        ("gpu", "ppo_cartpole", [], 1, "one device: 32 rows per gradient step and 128 env steps"),
        # 32 x 128 / 4 = 1,024 samples, 4,096 steps: 256 and 1,024 on each of 4 devices
        ("gpu", "ppo_cartpole", ["env.num_envs=32"], 4, "data parallel: 256 rows"),
        # recurrent: the rows are the 32 / 4 = 8 sequences a gradient step scans over
        (
            "gpu",
            "ppo_cartpole",
            ["env.num_envs=32", "agent.memory=gru"],
            1,
            "2 rows per gradient step",
        ),
        ("gpu", "ppo_cartpole", ["env.num_envs=32", "pipeline.rollout_len=64"], 1, "512 env steps"),
        # vmapped seeds share each all-reduce: 4 seeds of 8 x 128 / 4
        ("gpu", "ppo_cartpole", ["env.num_envs=8", "train.num_seeds=4"], 4, "data parallel"),
        ("gpu", "ppo_cartpole", ["env.num_envs=2050"], 1, "2050 envs do not split over 4"),
        (
            "gpu",
            "dqn_cartpole",
            ["replay.batch_size=1024", "env.num_envs=128", "pipeline.rollout_len=32"],
            4,
            "data parallel",
        ),
        ("gpu", "ppo_cartpole", ["pipeline.devices=2"], 2, "pipeline.devices=2"),
        (
            "gpu",
            "ppo_cartpole_async",
            ["pipeline.placement=split", "pipeline.actor_devices=2"],
            4,
            "split placement",
        ),
        ("gpu", "ppo_cartpole_async", [], 1, "one device: 32 rows"),  # auto: fused off CPU
        # CPU, lag >= 1: auto splits a small memoryless learner over an actor and a learner device
        ("cpu", "ppo_cartpole_async", [], 2, "split placement: one CPU device acts, one learns"),
        ("cpu", "ppo_cartpole_async", ["pipeline.placement=fused"], 1, "one device: 32 rows"),
        ("cpu", "ppo_cartpole_async", ["agent.memory=gru"], 1, "one device"),
        ("cpu", "ppo_cartpole_async", ["train.num_seeds=2"], 1, "one device"),
        ("cpu", "ppo_cartpole_async", ["env.num_envs=2048"], 4, "data parallel"),
        # CPU, on-policy: the thresholds, but not with 128-unit or wider layers
        ("cpu", "ppo_cartpole", [], 1, "one device: 32 rows per gradient step"),
        ("cpu", "ppo_cartpole", ["env.num_envs=2048"], 4, "data parallel: 16,384 rows"),
        ("cpu", "ppo_breakout_minatar", [], 1, "128-unit or wider layers"),
        ("cpu", "pqn_breakout_minatar", [], 1, "128-unit or wider layers"),
        ("cpu", "ppo_cartpole", ["env.num_envs=2048", "agent.hidden_sizes=[128]"], 1, "128-unit"),
        # CPU, off-policy: one device for a memoryless learner, for a recurrent one the most
        # devices the batches split over
        ("cpu", "dqn_cartpole", [], 1, "memoryless off-policy learner stays on one"),
        ("cpu", "sac_pendulum", [], 1, "memoryless off-policy learner stays on one"),
        ("cpu", "td3_pendulum", ["env.num_envs=8"], 1, "(pipeline.devices=4 forces 4)"),
        (
            "cpu",
            "r2d2_cartpole_masked",
            [],
            4,
            "data parallel over 4 of 4 CPU devices (a recurrent",
        ),
        # 6 envs but a replay batch of 16 sequences: 3 devices take the envs, not the batch
        ("cpu", "r2d2_cartpole_masked", ["env.num_envs=6"], 2, "over 2 of 4"),
        ("cpu", "r2d2_cartpole_masked", ["env.num_envs=1"], 1, "split over no more"),
        ("cpu", "sac_pendulum", ["pipeline.devices=2"], 2, "pipeline.devices=2"),
    ],
)
def test_devices_0_chooses_by_platform_learner_and_work_per_device(
    platform, name, overrides, devices, why
):
    from jaxrl_async.pipeline.layout import Machine, choose_layout

    config = load_config(name, overrides)
    layout = choose_layout(config, Machine(platform, 4))
    assert layout.devices == devices
    assert why in layout.devices_why
    assert config.prng_impl == "philox4x32"  # on any device count (sharding.lower_mulhi_on_meshes)
    # split (the first two devices, one acting and one learning) where the devices say so
    assert layout.placement == ("split" if "split placement" in why else "fused")
