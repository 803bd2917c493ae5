"""Split placement (actors on one device group, the learner on another) runs the same tick
as fused placement: both end in the same whole PipelineState, every leaf, env_steps and the
actor's clock included, for on-policy PPO (memoryless and recurrent: the one-program
split), for DQN on its prioritized replay and for R2D2 (an LSTM) on its sequence replay
(host-dispatched).

JAX fixes its device count when it starts, so the runs share one subprocess with
XLA_FLAGS=--xla_force_host_platform_device_count=4; it saves every leaf of the final states
to an .npz file.
"""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.helpers.cli import subprocess_env

# Every test here reads one subprocess of forced-device runs.
pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    import jaxrl_async

    assert jax.local_device_count() == 4, jax.devices()
    COMMON = ["train.progress=false", "train.prng=philox4x32"]
    PPO = ["env.num_envs=8", "pipeline.rollout_len=16", "agent.hidden_sizes=[16]",
           "agent.num_minibatches=2", "agent.num_epochs=2", "train.total_steps=1024",
           "train.log_every=256", "env.normalize_obs=true"] + COMMON
    # Recurrent: the actor's carry stays with the actor's half, its trajectories' carries
    # travel to the learner.
    GRU = ["env.num_envs=8", "pipeline.rollout_len=16", "agent.hidden_sizes=[8]",
           "agent.memory=gru", "agent.memory_size=8", "agent.num_minibatches=2",
           "train.total_steps=1024", "train.log_every=256"] + COMMON
    # DQN: epsilon falls over the run, so an actor whose clock were wrong would act otherwise.
    DQN = ["env.num_envs=4", "pipeline.rollout_len=4", "agent.hidden_sizes=[8]",
           "agent.n_step=2", "agent.updates_per_tick=2", "agent.epsilon_decay_steps=256",
           "agent.target_update_every=4", "replay.capacity=128", "replay.batch_size=16",
           "replay.learning_starts=64", "train.total_steps=512", "train.log_every=128"] + COMMON
    # R2D2 with an LSTM: the (c, h) carry in the actor's half and in every stored sequence.
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

    arrays = {}

    def keep(prefix, result):
        # Every leaf of the final state, the actor's clock included.
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
    keep("ppo/1/split/", split_ppo)
    keep("ppo/1/fused/", train("ppo_cartpole", PPO + FUSED + ["pipeline.lag=1"]))
    for name, config_name, overrides in (("gru", "ppo_cartpole", GRU),
                                         ("dqn", "dqn_cartpole", DQN),
                                         ("r2d2", "r2d2_cartpole_masked", R2D2)):
        for placement, where in (("fused", FUSED), ("split", SPLIT)):
            keep(f"{name}/1/{placement}/",
                 train(config_name, overrides + where + ["pipeline.lag=1"]))
    np.savez(sys.argv[1], **arrays)
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    path = tmp_path_factory.mktemp("split") / "states.npz"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path)],
        capture_output=True,
        text=True,
        env=subprocess_env(devices=4),
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(path) as data:
        return json.loads(proc.stdout.strip().splitlines()[-1]), dict(data)


def test_auto_placement_splits_a_small_lagged_learner_over_two_devices(ran):
    auto = ran[0]["auto"]
    assert auto["placement"] == "split" and auto["devices"] == ["cpu:0", "cpu:1"], auto
    assert "one CPU device acts, one learns" in auto["device_choice"]


def _run(states, prefix):
    return {k[len(prefix) :]: v for k, v in states.items() if k.startswith(prefix)}


# Lag 1 for PPO, DQN, recurrent PPO and R2D2 (the lag queue is the same code for every
# agent and lag; test_pipeline checks lag 2's data is exactly two updates old).
@pytest.mark.parametrize(
    "algo, lag, steps", [("ppo", 1, 1024), ("dqn", 1, 512), ("gru", 1, 1024), ("r2d2", 1, 512)]
)
def test_split_and_fused_end_in_the_same_state(ran, algo, lag, steps):
    states = ran[1]
    fused = _run(states, f"{algo}/{lag}/fused/")
    split = _run(states, f"{algo}/{lag}/split/")
    assert fused.keys() == split.keys()
    # On-policy the split is one program on both devices, its state replicated on both
    # (pipeline/split.py); off-policy the learner's half, its replay included, stays on cpu:1.
    offpolicy = algo in ("dqn", "r2d2")
    assert split["#learner_devices"].tolist() == (["cpu:1"] if offpolicy else ["cpu:0", "cpu:1"])
    assert fused["#learner_devices"].tolist() == ["cpu:0"]
    fields = {k.split("'")[0] for k in fused if not k.startswith("#")}
    assert {".env_steps", ".updates", ".actor_queue.versions"} <= fields, fields
    assert int(fused[".env_steps"]) == steps and int(split[".env_steps"]) == steps, (
        "the actor's clock must advance"
    )
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
