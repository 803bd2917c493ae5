"""`jaxrl-async plan` and the memory check before training: the bytes counted per device
are the bytes a run's initial state allocates, and a run that cannot fit is refused in
one line before anything is allocated or written."""

import json

import jax
import numpy as np
import pytest

import jaxrl_async
from jaxrl_async.errors import UserError
from jaxrl_async.pipeline import footprint as memory
from jaxrl_async.pipeline.program import compile_init
from jaxrl_async.tools.plan import format_plan, make_plan
from jaxrl_async.training.plan import plan_run
from jaxrl_async.training.trainer import build
from tests.helpers.cli import run_cli_in_process


def _allocated(tree) -> tuple[int, int]:
    """(bytes on the first device, bytes over all devices) of the arrays in `tree`, read
    from their shards (typed keys as their key data)."""
    first, whole = 0, 0
    for leaf in jax.tree.leaves(tree):
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        device = leaf.sharding.device_set and min(leaf.sharding.device_set, key=lambda d: d.id)
        first += sum(s.data.nbytes for s in leaf.addressable_shards if s.device == device)
        whole += np.asarray(leaf).nbytes
    return first, whole


@pytest.mark.parametrize("name", ["ppo_cartpole", "dqn_cartpole", "ppo_rnn_cartpole_masked"])
def test_predicted_bytes_are_the_initial_states(name):
    """On-policy, off-policy (its replay) and recurrent (its carries): the bytes counted
    before allocating equal the real initial state's, per device and in all."""
    config = jaxrl_async.load_config(name)
    built = build(config, plan_run(config, None, False))
    footprint = memory.run_footprint(config, (built.pipeline,))
    key = jax.random.key(config.train.seed, impl=config.prng_impl)
    state = compile_init(jax.jit(built.pipeline.init).lower(key))(key)
    per_device, whole = _allocated(state)
    assert sum(footprint.state.values()) == per_device
    assert footprint.state_bytes == whole
    if config.agent.off_policy:  # the replay is the off-policy run's largest part
        assert footprint.state["replay"] == _allocated(state.replay)[0] > 0
        assert footprint.largest == "replay"
    if config.agent.recurrent:
        assert footprint.state["env states"] >= _allocated(state.memory)[0] > 0
    # the trajectory a tick writes lives only in the program: counted on top of the state
    assert footprint.tick_trajectory > 0
    assert footprint.total == sum(footprint.state.values()) + footprint.tick_trajectory


def test_a_run_that_cannot_fit_is_refused_in_one_line_before_allocating(tmp_path):
    """64 seeds of a 2e9-transition replay: terabytes, refused with the largest part and
    the key to shrink, exit 2, no run directory written."""
    run_dir = tmp_path / "run"
    code, err = run_cli_in_process(
        "train",
        "dqn_cartpole",
        "replay.capacity=2000000000",
        "train.num_seeds=64",
        "--run-dir",
        str(run_dir),
        cwd=tmp_path,
    )
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "replay" in err and "shrink replay.capacity" in err
    assert not run_dir.exists()


class _Device:
    """A device as `memory.device_memory` reads it: a platform and memory_stats."""

    def __init__(self, platform, stats):
        self.platform, self.stats = platform, stats

    def memory_stats(self):
        return self.stats


def test_device_memory_limit_refuses_only_what_exceeds_it():
    footprint = memory.Footprint(
        dict.fromkeys(memory.PARTS, 0) | {"parameters": 600, "optimizer state": 300}, 200, 900
    )
    assert footprint.total == 1100 and footprint.largest == "parameters"
    memory.check_fits(footprint, [_Device("gpu", {"bytes_limit": 1100})])
    memory.check_fits(footprint, [_Device("gpu", {})])  # a device that reports nothing
    with pytest.raises(UserError, match=r"per GPU device: shrink agent\.hidden_sizes"):
        memory.check_fits(footprint, [_Device("gpu", {"bytes_limit": 1099})])
    with pytest.raises(UserError, match=r"shrink train\.num_seeds"):
        memory.check_fits(footprint, [_Device("gpu", {"bytes_limit": 1000})], num_seeds=8)


def test_plan_of_an_off_policy_run():
    """dqn_cartpole's plan: devices with their reasons, per-device batches, parts adding up
    to the total, the host calls covering the run, its programs, and JSON that
    round-trips; the CLI prints it and exits 0."""
    config = jaxrl_async.load_config("dqn_cartpole")
    plan = make_plan(config)
    assert plan["devices"]["line"] == "devices: 1 CPU, fused"
    assert plan["devices"]["devices_why"] and plan["devices"]["placement_why"]
    parts = dict(plan["bytes_per_device"])
    total = parts.pop("total")
    assert total == sum(parts.values()) and parts["replay"] > parts["parameters"] > 0
    assert plan["batches"]["replay_capacity"] == config.replay.capacity
    assert plan["batches"]["trajectory"] == [config.pipeline.rollout_len, config.env.num_envs]
    assert plan["host_calls"] * plan["env_steps_per_call"] == plan["env_steps"]
    assert plan["programs"][:2] == ["init", f"chunk of {plan['ticks_per_call']} ticks"]
    assert plan["memory"]["fits"] is True
    assert plan["checkpoint_bytes"] < total  # the tick's trajectory is not saved
    assert json.loads(json.dumps(plan)) == plan
    text = format_plan(plan)
    for word in (*parts, "host calls", "compiled programs", "checkpoint", "devices:"):
        assert word in text
    code, err = run_cli_in_process("plan", "dqn_cartpole", "--json", cwd=".")
    assert code == 0, err


def test_plan_of_a_host_env_run_says_what_it_counts():
    """A Gymnasium config: the learner's device is counted, the host's envs are named as
    not counted."""
    pytest.importorskip("gymnasium")
    plan = make_plan(jaxrl_async.load_config("ppo_gymnasium_cartpole"))
    assert plan["bytes_per_device"]["parameters"] > 0
    assert any("not counted" in line for line in plan["not_counted"])
    assert "not counted" in format_plan(plan)
    assert ", 1 actor process\n" in format_plan(plan)
    assert "each actor's policy on its own process's CPU" in format_plan(plan)
    threads = jaxrl_async.load_config("ppo_gymnasium_cartpole", ["pipeline.actor_processes=false"])
    assert ", 1 actor thread\n" in format_plan(make_plan(threads))
    cheetah = make_plan(jaxrl_async.load_config("ppo_halfcheetah"))
    assert "8 envs, trajectory [256, 8], 64 rows per gradient step, 2 actor processes" in (
        format_plan(cheetah)
    )


def test_a_run_names_its_devices_in_one_short_line():
    """What `trainer` prints at a run's end (the reasons are plan's)."""
    from jaxrl_async.pipeline.layout import Layout, Machine, choose_layout

    fused = choose_layout(jaxrl_async.load_config("dqn_cartpole"), Machine("cpu", 2))
    assert fused.line() == "devices: 1 CPU, fused" and "off-policy" in fused.devices_why
    split = Layout(2, "split", 1, "cpu", "", "")
    assert split.line() == "devices: 2 CPU, split (1 acting)"


def test_a_host_env_run_that_cannot_fit_is_refused_before_allocating(tmp_path, monkeypatch):
    """A Gymnasium DQN run on a learner device of 64 KiB (patched: a real run this large
    would allocate it on a large machine): its replay is named, nothing is written."""
    pytest.importorskip("gymnasium")
    monkeypatch.setattr(memory, "device_memory", lambda devices: (2**16, "64 KiB (patched)"))
    config = jaxrl_async.load_config("dqn_cartpole", ["env.name=gymnasium:CartPole-v1"])
    with pytest.raises(UserError, match=r"\(replay .*shrink replay\.capacity"):
        jaxrl_async.train(config, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
