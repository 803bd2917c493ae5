"""Data parallelism over forced CPU devices: same numbers as one device; and split
placement (actors on one device group, the learner on another) runs the same tick as fused
placement.

JAX fixes its device count when it starts, so these run in one subprocess with
XLA_FLAGS=--xla_force_host_platform_device_count=4 and build meshes of 1, 2 and 4. The
split runs reuse the one-device runs as their fused reference (the same config), so each
program compiles once; the subprocess saves every leaf of those final states to an .npz file.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
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
                ["pipeline.placement=split", "pipeline.lag=1", "pipeline.actor_devices=4"],
                ["pipeline.placement=split", "pipeline.lag=0"]):
        try:
            jaxrl_async.choose_layout(jaxrl_async.load_config("ppo_cartpole", bad))
            errors.append(None)
        except jaxrl_async.ConfigError as e:
            errors.append(str(e))
    COMMON = ["train.progress=false", "train.prng=philox4x32"]
    PPO = ["env.num_envs=8", "pipeline.rollout_len=16", "agent.hidden_sizes=[16]",
           "agent.num_minibatches=2", "agent.num_epochs=2", "train.total_steps=1024",
           "train.log_every=256", "env.normalize_obs=true"] + COMMON
    # Recurrent: the carries split over the devices with the envs.
    GRU = ["env.num_envs=8", "pipeline.rollout_len=16", "agent.hidden_sizes=[8]",
           "agent.memory=gru", "agent.memory_size=8", "agent.num_minibatches=2",
           "train.total_steps=1024", "train.log_every=256"] + COMMON
    DQN = ["env.num_envs=4", "pipeline.rollout_len=4", "agent.hidden_sizes=[16]",
           "agent.n_step=2", "agent.updates_per_tick=2", "replay.capacity=128",
           "replay.batch_size=16", "replay.learning_starts=64", "train.total_steps=1024",
           "train.log_every=256"] + COMMON
    # Split placement's DQN: epsilon falls over the run, so an actor whose clock were wrong
    # would act otherwise.
    SPLIT_DQN = ["env.num_envs=4", "pipeline.rollout_len=4", "agent.hidden_sizes=[8]",
                 "agent.n_step=2", "agent.updates_per_tick=2", "agent.epsilon_decay_steps=256",
                 "agent.target_update_every=4", "replay.capacity=128", "replay.batch_size=16",
                 "replay.learning_starts=64", "train.total_steps=512",
                 "train.log_every=128"] + COMMON
    # R2D2 with an LSTM: the (c, h) carry in the actor's half and in every stored sequence
    R2D2 = ["env.num_envs=4", "pipeline.rollout_len=8", "agent.sequence_length=8",
            "agent.sequence_overlap=4", "agent.burn_in=2", "agent.hidden_sizes=[8]",
            "agent.memory=lstm", "agent.memory_size=8", "agent.updates_per_tick=2",
            "agent.epsilon_decay_steps=256", "replay.capacity=64", "replay.batch_size=8",
            "replay.learning_starts=64", "train.total_steps=512",
            "train.log_every=128"] + COMMON
    FUSED = ["pipeline.devices=1"]
    SPLIT = ["pipeline.placement=split", "pipeline.devices=2", "pipeline.actor_devices=1"]

    def train(name, overrides):
        return jaxrl_async.train(jaxrl_async.load_config(name, overrides))

    def flat(tree):
        return np.asarray(ravel_pytree(tree)[0]).tolist()

    arrays = {}

    def keep(prefix, result):
        # Split against fused: every leaf of the final state, the actor's clock included.
        for path, leaf in jax.tree_util.tree_leaves_with_path(result.state):
            if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
                leaf = jax.random.key_data(leaf)
            arrays[prefix + jax.tree_util.keystr(path)] = np.asarray(leaf)
        arrays[prefix + "#learner_devices"] = np.asarray(sorted(
            str(d) for d in jax.tree.leaves(result.state.learner)[0].devices()))
        arrays[prefix + "#return"] = result.metrics["episode_return"]

    out = {}
    # Split first, before anything builds a mesh of its own: its programs over two devices
    # must lower Philox's high-half multiply themselves (`split.split_meshes`). Chosen by
    # pipeline.placement=auto: a small learner at lag 1 on CPU.
    split_ppo = train("ppo_cartpole", PPO + ["pipeline.lag=1"])
    out["auto"] = {k: split_ppo.summary[k] for k in ("placement", "devices", "device_choice")}
    for lag, counts in ((0, (1, 2, 4)), (1, (1, 2))):  # 4 devices at lag 0: the queue is common
        for devices in counts:
            result = train("ppo_cartpole", PPO + [f"pipeline.devices={devices}",
                                                  f"pipeline.lag={lag}"])
            out[f"{lag}/{devices}"] = {"params": flat(result.state.learner.params),
                                       "loss": result.metrics["loss"].tolist(),
                                       "return": result.metrics["episode_return"].tolist(),
                                       "devices": result.summary["devices"]}
            if lag == 1 and devices == 1:
                keep("ppo/1/fused/", result)
    keep("ppo/1/split/", split_ppo)
    # A sweep on 2 devices: its runs share the mesh; point 0 is the "0/2" run above.
    base = jaxrl_async.load_config("ppo_cartpole", PPO + ["pipeline.devices=2"])
    swept = jaxrl_async.sweep(base, {"agent.learning_rate": [base.agent.learning_rate, 0.0]})
    out["sweep/2"] = {
        "params": flat(jax.tree.map(lambda x: x[0], swept.states[0].learner.params)),
        "loss": swept.metrics(0)["loss"].tolist(), "devices": swept.summaries[0]["devices"]}
    # Recurrent: PPO at lag 1 (the stored carries in flight), IMPALA at lag 1 (V-trace over
    # minibatches of env groups; the memoryless IMPALA's learner is the same code).
    for name, lag in (("ppo_cartpole", 1), ("impala_cartpole", 1)):
        for devices in (1, 2):
            result = train(name, GRU + [f"pipeline.lag={lag}", f"pipeline.devices={devices}"])
            out[f"gru-{name}{lag}/{devices}"] = {
                "params": flat(result.state.learner.params),
                "loss": result.metrics["loss"].tolist(),
                "carry": np.asarray(result.state.memory.carry).tolist(),
                "carry_devices": len(result.state.memory.carry.devices())}
            if name == "ppo_cartpole" and devices == 1:
                keep(f"gru/{lag}/fused/", result)
    # gru: a recurrent actor's carry stays with the actor's half, its trajectories' carries
    # travel to the learner
    keep("gru/1/split/", train("ppo_cartpole", GRU + SPLIT + ["pipeline.lag=1"]))
    for devices in (1, 2):  # DQN: one prioritized replay per device
        result = train("dqn_cartpole", DQN + [f"pipeline.devices={devices}"])
        replay = result.state.replay
        out[f"dqn/{devices}"] = {
            "shards": int(replay.ring.size.shape[0]),
            "sizes": np.asarray(replay.ring.size).tolist(),
            "replay_devices": len(replay.tree.leaves.devices()),
            "steps": int(result.state.learner.steps),
            "loss": result.metrics["loss"].tolist(),
            "return": result.metrics["episode_return"].tolist()}
    # Split placement at lag 1 for DQN on its prioritized replay and R2D2 on its sequence replay.
    for name, config_name, overrides in (("dqn", "dqn_cartpole", SPLIT_DQN),
                                         ("r2d2", "r2d2_cartpole_masked", R2D2)):
        for placement, where in (("fused", FUSED), ("split", SPLIT)):
            keep(f"{name}/1/{placement}/",
                 train(config_name, overrides + where + ["pipeline.lag=1"]))
    try:
        jaxrl_async.choose_layout(jaxrl_async.load_config(
            "dqn_cartpole", ["replay.batch_size=130", "env.num_envs=8", "pipeline.devices=4"]))
        errors.append(None)
    except jaxrl_async.ConfigError as e:
        errors.append(str(e))
    out["errors"] = errors
    np.savez(sys.argv[1], **arrays)
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    path = tmp_path_factory.mktemp("multidevice") / "states.npz"
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(path)], capture_output=True,
                          text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(path) as data:
        return json.loads(proc.stdout.strip().splitlines()[-1]), dict(data)


@pytest.fixture(scope="module")
def runs(ran):
    return ran[0]


@pytest.fixture(scope="module")
def states(ran):
    return ran[1]


def test_a_sweep_on_two_devices_equals_its_single_run(runs):
    swept, single = runs["sweep/2"], runs["0/2"]
    assert len(swept["devices"]) == 2
    np.testing.assert_allclose(swept["params"], single["params"], atol=1e-5)
    np.testing.assert_allclose(swept["loss"], single["loss"], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("lag, devices", [(0, 2), (0, 4), (1, 2)])
def test_same_parameters_as_one_device(runs, lag, devices):

    one, many = runs[f"{lag}/1"], runs[f"{lag}/{devices}"]
    assert len(many["devices"]) == devices and len(one["devices"]) == 1
    # Same envs, same actions: episode statistics agree exactly or to float rounding.
    np.testing.assert_allclose(many["return"], one["return"], rtol=1e-5)
    np.testing.assert_allclose(many["loss"], one["loss"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(many["params"], one["params"], rtol=0, atol=1e-5)
    # ...and training moved them: the comparison is not between two initialisations.
    assert np.abs(np.asarray(one["params"])).sum() > 0


def test_auto_placement_splits_a_small_lagged_learner_over_two_devices(runs):
    auto = runs["auto"]
    assert auto["placement"] == "split" and auto["devices"] == ["cpu:0", "cpu:1"], auto
    assert "one CPU device acts, one learns" in auto["device_choice"]


def test_batches_that_do_not_split_over_the_devices_are_config_errors(runs):
    errors = runs["errors"]
    assert all(e is not None and "\n" not in e for e in errors), errors
    assert "does not split over 4 devices" in errors[0]
    assert "only 4 local devices" in errors[1]
    assert "actor_devices" in errors[2] and "lag >= 1" in errors[3]


@pytest.mark.parametrize("name, lag", [("ppo_cartpole", 1), ("impala_cartpole", 1)])
def test_recurrent_same_parameters_on_two_devices(runs, name, lag):

    one, two = runs[f"gru-{name}{lag}/1"], runs[f"gru-{name}{lag}/2"]
    assert one["carry_devices"] == 1 and two["carry_devices"] == 2
    np.testing.assert_allclose(two["loss"], one["loss"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(two["params"], one["params"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(two["carry"], one["carry"], rtol=0, atol=1e-5)


def test_dqn_keeps_one_replay_per_device(runs):
    """Each device stores its own envs' transitions in a replay of capacity/D."""

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


# ---------------------------------------------------------------------------------------------
# Split placement: both placements end in the same whole PipelineState, every leaf,
# env_steps and the actor's clock included, for on-policy PPO (memoryless and recurrent: the
# one-program split), for DQN on its prioritized replay and for R2D2 (an LSTM) on its
# sequence replay (host-dispatched).


def _run(states, prefix):
    return {k[len(prefix):]: v for k, v in states.items() if k.startswith(prefix)}


# Lag 1 for PPO, DQN, recurrent PPO and R2D2 (the lag queue is the same code for every
# agent and lag; test_pipeline checks lag 2's data is exactly two updates old).
@pytest.mark.parametrize("algo, lag, steps", [("ppo", 1, 1024), ("dqn", 1, 512),
                                              ("gru", 1, 1024), ("r2d2", 1, 512)])
def test_split_and_fused_end_in_the_same_state(states, algo, lag, steps):
    fused = _run(states, f"{algo}/{lag}/fused/")
    split = _run(states, f"{algo}/{lag}/split/")
    assert fused.keys() == split.keys()
    # On-policy the split is one program on both devices, its state replicated on both
    # (split.py); off-policy the learner's half, its replay included, stays on cpu:1.
    offpolicy = algo in ("dqn", "r2d2")
    assert split["#learner_devices"].tolist() == (["cpu:1"] if offpolicy else ["cpu:0", "cpu:1"])
    assert fused["#learner_devices"].tolist() == ["cpu:0"]
    fields = {k.split("'")[0] for k in fused if not k.startswith("#")}
    assert {".env_steps", ".updates", ".actor_queue.versions"} <= fields, fields
    assert int(fused[".env_steps"]) == steps and int(split[".env_steps"]) == steps, \
        "the actor's clock must advance"
    for key, a in fused.items():
        if key.startswith("#learner"):
            continue
        b = split[key]
        assert a.shape == b.shape and a.dtype == b.dtype, key
        if np.issubdtype(a.dtype, np.floating):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5, err_msg=key)
        else:
            np.testing.assert_array_equal(b, a, err_msg=key)
    # Episodes ended in the run: the states compared are not those of an idle start.
    assert np.isfinite(fused["#return"]).any()
