"""Data parallelism over forced CPU devices: same numbers as one device.

JAX fixes its device count when it starts, so these run in a subprocess with
XLA_FLAGS=--xla_force_host_platform_device_count=4 and build meshes of 1, 2 and 4.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

# Every test here reads one subprocess of forced-device runs (tens of seconds).
pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    import jaxrl_async
    from jax.flatten_util import ravel_pytree

    assert jax.local_device_count() == 4, jax.devices()
    errors = []
    for bad in (["env.num_envs=6", "pipeline.devices=4"], ["pipeline.devices=8"],
                ["train.prng=philox4x32", "pipeline.devices=4"],
                ["pipeline.placement=split", "pipeline.lag=1", "pipeline.actor_devices=4"],
                ["pipeline.placement=split", "pipeline.lag=0"]):
        try:
            jaxrl_async.load_config("ppo_cartpole", bad)
            errors.append(None)
        except jaxrl_async.ConfigError as e:
            errors.append(str(e))
    overrides = ["env.num_envs=8", "pipeline.rollout_len=16", "agent.hidden_sizes=[16]",
                 "agent.num_minibatches=2", "agent.num_epochs=2", "train.total_steps=1024",
                 "train.log_every=256", "train.progress=false", "env.normalize_obs=true",
                 "train.prng=threefry2x32"]
    out = {}
    for lag, counts in ((0, (1, 2, 4)), (1, (1, 2))):  # 4 devices at lag 0: the queue is common
        for devices in counts:
            config = jaxrl_async.load_config("ppo_cartpole", overrides + [
                f"pipeline.devices={devices}", f"pipeline.lag={lag}"])
            result = jaxrl_async.train(config)
            flat = ravel_pytree(result.state.learner.params)[0]
            out[f"{lag}/{devices}"] = {"params": np.asarray(flat).tolist(),
                                       "loss": result.metrics["loss"].tolist(),
                                       "return": result.metrics["episode_return"].tolist(),
                                       "devices": result.summary["devices"]}
    for lag in (1,):  # IMPALA too: its minibatches are env groups, its targets V-trace
        for devices in (1, 2):
            config = jaxrl_async.load_config("impala_cartpole", [
                "env.num_envs=8", "pipeline.rollout_len=16", "agent.hidden_sizes=[16]",
                "agent.num_minibatches=2", "train.total_steps=1024", "train.log_every=256",
                "train.progress=false", "train.prng=threefry2x32", f"pipeline.lag={lag}",
                f"pipeline.devices={devices}"])
            result = jaxrl_async.train(config)
            out[f"impala{lag}/{devices}"] = {
                "params": np.asarray(ravel_pytree(result.state.learner.params)[0]).tolist(),
                "loss": result.metrics["loss"].tolist()}
    # Recurrent: PPO at lag 1 (the stored carries in flight), IMPALA at lag 1 (V-trace).
    for name, lag in (("ppo_cartpole", 1), ("impala_cartpole", 1)):
        for devices in (1, 2):  # recurrent: the carries split over the devices with the envs
            config = jaxrl_async.load_config(name, [
                "env.num_envs=8", "pipeline.rollout_len=16", "agent.hidden_sizes=[8]",
                "agent.memory=gru", "agent.memory_size=8", "agent.num_minibatches=2",
                "train.total_steps=1024", "train.log_every=256", "train.progress=false",
                "train.prng=threefry2x32", f"pipeline.lag={lag}", f"pipeline.devices={devices}"])
            result = jaxrl_async.train(config)
            out[f"gru-{name}{lag}/{devices}"] = {
                "params": np.asarray(ravel_pytree(result.state.learner.params)[0]).tolist(),
                "loss": result.metrics["loss"].tolist(),
                "carry": np.asarray(result.state.memory.carry).tolist(),
                "carry_devices": len(result.state.memory.carry.devices())}
    for devices in (1, 2):  # DQN: one prioritized replay per device
        config = jaxrl_async.load_config("dqn_cartpole", [
            "env.num_envs=4", "pipeline.rollout_len=4", "agent.hidden_sizes=[16]",
            "agent.n_step=2", "agent.updates_per_tick=2", "replay.capacity=128",
            "replay.batch_size=16", "replay.learning_starts=64", "train.total_steps=1024",
            "train.log_every=256", "train.progress=false", "train.prng=threefry2x32",
            f"pipeline.devices={devices}"])
        result = jaxrl_async.train(config)
        replay = result.state.replay
        out[f"dqn/{devices}"] = {
            "shards": int(replay.ring.size.shape[0]),
            "sizes": np.asarray(replay.ring.size).tolist(),
            "replay_devices": len(replay.tree.leaves.devices()),
            "steps": int(result.state.learner.steps),
            "loss": result.metrics["loss"].tolist(),
            "return": result.metrics["episode_return"].tolist()}
    try:
        jaxrl_async.load_config("dqn_cartpole", ["replay.batch_size=130", "env.num_envs=8",
                                                 "pipeline.devices=4"])
        errors.append(None)
    except jaxrl_async.ConfigError as e:
        errors.append(str(e))
    out["errors"] = errors
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("lag, devices", [(0, 2), (0, 4), (1, 2)])
def test_same_parameters_as_one_device(runs, lag, devices):
    import numpy as np

    one, many = runs[f"{lag}/1"], runs[f"{lag}/{devices}"]
    assert len(many["devices"]) == devices and len(one["devices"]) == 1
    # Same envs, same actions: episode statistics agree exactly or to float rounding.
    np.testing.assert_allclose(many["return"], one["return"], rtol=1e-5)
    np.testing.assert_allclose(many["loss"], one["loss"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(many["params"], one["params"], rtol=0, atol=1e-5)
    # ...and training moved them: the comparison is not between two initialisations.
    assert np.abs(np.asarray(one["params"])).sum() > 0


def test_batches_that_do_not_split_over_the_devices_are_config_errors(runs):
    errors = runs["errors"]
    assert all(e is not None and "\n" not in e for e in errors), errors
    assert "does not split over 4 devices" in errors[0]
    assert "only 4 local devices" in errors[1]
    assert "philox4x32" in errors[2]
    assert "actor_devices" in errors[3] and "lag >= 1" in errors[4]


@pytest.mark.parametrize("lag", [1])
def test_impala_same_parameters_on_two_devices(runs, lag):
    import numpy as np

    one, two = runs[f"impala{lag}/1"], runs[f"impala{lag}/2"]
    np.testing.assert_allclose(two["loss"], one["loss"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(two["params"], one["params"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("name, lag", [("ppo_cartpole", 1), ("impala_cartpole", 1)])
def test_recurrent_same_parameters_on_two_devices(runs, name, lag):
    import numpy as np

    one, two = runs[f"gru-{name}{lag}/1"], runs[f"gru-{name}{lag}/2"]
    assert one["carry_devices"] == 1 and two["carry_devices"] == 2
    np.testing.assert_allclose(two["loss"], one["loss"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(two["params"], one["params"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(two["carry"], one["carry"], rtol=0, atol=1e-5)


def test_dqn_keeps_one_replay_per_device(runs):
    """Each device stores its own envs' transitions in a replay of capacity/D."""
    import numpy as np

    one, two = runs["dqn/1"], runs["dqn/2"]
    assert one["shards"] == 1 and two["shards"] == 2 and two["replay_devices"] == 2
    # 1024 steps into 128 slots: full on one device; 64 slots per device on two.
    assert one["sizes"] == [128] and two["sizes"] == [64, 64]
    assert one["steps"] == two["steps"] == 2 * (64 - 4)  # learning starts at tick 4 of 64
    # Same envs and the same actions until learning starts; then the sharded replay
    # draws other batches, so only the first log point's returns must agree.
    np.testing.assert_allclose(two["return"][0], one["return"][0], rtol=1e-5)
    assert np.all(np.isfinite(two["loss"])) and two["loss"][-1] > 0
    assert "replay.batch_size=130 does not split over 4 devices" in runs["errors"][-1]
