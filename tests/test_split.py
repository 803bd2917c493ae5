"""Split placement (actors on one device group, the learner on another) runs the same tick
as fused placement: both end in the same whole PipelineState, every leaf, env_steps and
the actor's clock included, for on-policy PPO (memoryless and recurrent: the one-program
split), for DQN on its prioritized replay and for R2D2 (an LSTM) on its sequence replay
(host-dispatched).

JAX fixes its device count when it starts, so the runs happen in a subprocess with two
forced CPU devices; it saves every leaf of each final state to an .npz file.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

# Every test here reads one subprocess of fused and split runs on forced devices (tens of seconds).
pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent("""
    import sys
    import jax, numpy as np
    import jaxrl_async

    PPO = ["env.num_envs=4", "pipeline.rollout_len=8", "agent.hidden_sizes=[8]",
           "agent.num_minibatches=2", "agent.num_epochs=2", "train.total_steps=512",
           "train.log_every=128"]
    # epsilon falls over the run, so an actor whose clock were wrong would act otherwise
    DQN = ["env.num_envs=4", "pipeline.rollout_len=4", "agent.hidden_sizes=[8]",
           "agent.n_step=2", "agent.updates_per_tick=2", "agent.epsilon_decay_steps=256",
           "agent.target_update_every=4", "replay.capacity=128", "replay.batch_size=16",
           "replay.learning_starts=64", "train.total_steps=512", "train.log_every=128"]
    # R2D2 with an LSTM: the (c, h) carry in the actor's half and in every stored sequence
    R2D2 = ["env.num_envs=4", "pipeline.rollout_len=8", "agent.sequence_length=8",
            "agent.sequence_overlap=4", "agent.burn_in=2", "agent.hidden_sizes=[8]",
            "agent.memory=lstm", "agent.memory_size=8", "agent.updates_per_tick=2",
            "agent.epsilon_decay_steps=256", "replay.capacity=64", "replay.batch_size=8",
            "replay.learning_starts=64", "train.total_steps=512", "train.log_every=128"]
    COMMON = ["train.progress=false", "train.prng=threefry2x32"]
    PLACEMENTS = {"fused": ["pipeline.devices=1"],
                  "split": ["pipeline.placement=split", "pipeline.devices=2",
                            "pipeline.actor_devices=1"]}

    def leaves(state):
        out = {}
        for path, leaf in jax.tree_util.tree_leaves_with_path(state):
            if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
                leaf = jax.random.key_data(leaf)
            out[jax.tree_util.keystr(path)] = np.asarray(leaf)
        return out

    arrays = {}
    # gru: a recurrent actor's carry stays with the actor's half, its trajectories' carries
    # travel to the learner (at lag 1 only: the suite's time)
    for name, config_name, overrides, lags in (
            ("ppo", "ppo_cartpole", PPO, (1,)), ("dqn", "dqn_cartpole", DQN, (1,)),
            ("gru", "ppo_cartpole", PPO + ["agent.memory=gru", "agent.memory_size=8"], (1,)),
            ("r2d2", "r2d2_cartpole_masked", R2D2, (1,))):
        for lag in lags:
            for placement, where in PLACEMENTS.items():
                result = jaxrl_async.train(jaxrl_async.load_config(
                    config_name, overrides + COMMON + where + [f"pipeline.lag={lag}"]))
                prefix = f"{name}/{lag}/{placement}/"
                arrays.update({prefix + k: v for k, v in leaves(result.state).items()})
                arrays[prefix + "#learner_devices"] = np.asarray(sorted(
                    str(d) for d in jax.tree.leaves(result.state.learner)[0].devices()))
                arrays[prefix + "#return"] = result.metrics["episode_return"]
    np.savez(sys.argv[1], **arrays)
""")


@pytest.fixture(scope="module")
def states(tmp_path_factory):
    path = tmp_path_factory.mktemp("split") / "states.npz"
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(path)], capture_output=True,
                          text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(path) as data:
        return dict(data)


def _run(states, prefix):
    return {k[len(prefix):]: v for k, v in states.items() if k.startswith(prefix)}


# Lag 1 for PPO, DQN, recurrent PPO and R2D2 (the lag queue is the same code for every
# agent and lag; test_pipeline checks lag 2's data is exactly two updates old).
@pytest.mark.parametrize("algo, lag", [("ppo", 1), ("dqn", 1), ("gru", 1), ("r2d2", 1)])
def test_split_and_fused_end_in_the_same_state(states, algo, lag):
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
    steps = int(fused[".env_steps"])
    assert steps == 512 and int(split[".env_steps"]) == steps, "the actor's clock must advance"
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
