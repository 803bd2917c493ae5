"""Data parallelism over forced CPU devices, once for every agent family: N devices train
what one device trains.

On-policy agents (PPO, recurrent PPO, IMPALA, PQN) are compared on whole runs: the same
envs and actions, so the same returns, losses and parameters to float rounding.
Off-policy agents (DQN, R2D2, SAC, TD3) keep one replay shard per device, so whole runs
draw other batches; for them a whole run shows the shards, and learner updates on the same
batch split over one or two devices give the same parameters, losses and priorities.

JAX fixes its device count when it starts, so these run in one subprocess with
XLA_FLAGS=--xla_force_host_platform_device_count=4 and build meshes of 1 and 2 (the
errors need 4: a batch that does not split over them).
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
    from jax.flatten_util import ravel_pytree
    from jax.sharding import NamedSharding, PartitionSpec as P
    import jaxrl_async
    from jaxrl_async.pipeline.build import build_pipeline
    from jaxrl_async.replay import prioritized
    from jaxrl_async.pipeline.sharding import AXIS, make_mesh
    from jaxrl_async.types import LearnOutput
    from tests.helpers.configs import PQN_LAG1, R2D2_TINY
    from tests.helpers.references import pendulum_sample

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
    # The continuous-control learners' updates run on a hand-made batch.
    SAC = ["agent.hidden_sizes=[16,16]", "agent.learning_rate=3e-3"]
    TD3 = ["agent.hidden_sizes=[16,16]", "agent.learning_rate=3e-3", "agent.policy_delay=3",
           "agent.updates_per_tick=2"]

    def train(name, overrides):
        return jaxrl_async.train(jaxrl_async.load_config(name, overrides))

    def flat(tree):
        return np.asarray(ravel_pytree(tree)[0]).tolist()

    def learn_steps(config, learner, samples, devices):
        # The learner's updates with each batch split over `devices` (shard_map, pmean'd
        # gradients); every float leaf of the learner's state after each, and its metrics.
        mesh = make_mesh(devices)
        _, agent = build_pipeline(config, mesh=mesh)
        learn = jax.jit(jax.shard_map(agent.learn, mesh=mesh, in_specs=(P(), P(AXIS), P()),
                                      out_specs=LearnOutput(P(), P(), P(AXIS)),
                                      check_vma=False))
        on = lambda tree, spec: jax.device_put(tree, NamedSharding(mesh, spec))
        state, steps = on(learner, P()), []
        for i, sample in enumerate(samples):
            state, metrics, priorities = learn(state, on(sample, P(AXIS)), jax.random.key(10 + i))
            floats = [x for x in jax.tree.leaves(state)
                      if jax.numpy.issubdtype(x.dtype, jax.numpy.floating)]
            steps.append({"state": flat(floats), "priorities": np.asarray(priorities).tolist(),
                          "metrics": {k: float(v) for k, v in metrics.items()}})
        return steps

    def replay_sample(replay, size=16):
        # The first `size` items of the replay's shards, with unequal importance weights.
        items = jax.tree.map(lambda x: np.asarray(x).reshape(-1, *x.shape[2:])[:size],
                             replay.ring.items)
        return prioritized.Sample(items, np.arange(size, dtype=np.int32),
                                  np.full(size, 1 / size, np.float32),
                                  np.linspace(0.2, 1.0, size).astype(np.float32))

    out = {}
    for lag in (0, 1):
        for devices in (1, 2):
            result = train("ppo_cartpole", PPO + [f"pipeline.devices={devices}",
                                                  f"pipeline.lag={lag}"])
            out[f"ppo-lag{lag}/{devices}"] = {
                "params": flat(result.state.learner.params),
                "loss": result.metrics["loss"].tolist(),
                "return": result.metrics["episode_return"].tolist(),
                "devices": result.summary["devices"]}
    # A sweep on 2 devices: its runs share the mesh; point 0 is the ppo-lag0/2 run above.
    base = jaxrl_async.load_config("ppo_cartpole", PPO + ["pipeline.devices=2"])
    swept = jaxrl_async.sweep(base, {"agent.learning_rate": [base.agent.learning_rate, 0.0]})
    out["sweep/2"] = {
        "params": flat(jax.tree.map(lambda x: x[0], swept.states[0].learner.params)),
        "loss": swept.metrics(0)["loss"].tolist(), "devices": swept.summaries[0]["devices"]}
    # Recurrent: PPO at lag 1 (the stored carries in flight), IMPALA at lag 1 (V-trace over
    # minibatches of env groups; the memoryless IMPALA's learner is the same code).
    for name in ("ppo_cartpole", "impala_cartpole"):
        for devices in (1, 2):
            result = train(name, GRU + ["pipeline.lag=1", f"pipeline.devices={devices}"])
            out[f"gru-{name}/{devices}"] = {
                "params": flat(result.state.learner.params),
                "loss": result.metrics["loss"].tolist(),
                "carry": np.asarray(result.state.memory.carry).tolist(),
                "carry_devices": len(result.state.memory.carry.devices())}
    # PQN at lag 1, its 8 envs split 4 and 4.
    for devices in (1, 2):
        result = train("pqn_cartpole", PQN_LAG1 + [f"pipeline.devices={devices}"])
        out[f"pqn/{devices}"] = {key: np.asarray(result.metrics[key]).tolist() for key in
                                 ("loss", "epsilon", "target_mean", "episode_return")}
        out[f"pqn/{devices}"].update(params=flat(result.state.learner.params),
                                     devices=result.summary["devices"])
    # DQN: one prioritized replay per device; its learner on one batch of that replay.
    for devices in (1, 2):
        result = train("dqn_cartpole", DQN + [f"pipeline.devices={devices}"])
        replay = result.state.replay
        out[f"dqn/{devices}"] = {
            "shards": int(replay.ring.size.shape[0]),
            "sizes": np.asarray(replay.ring.size).tolist(),
            "replay_devices": len(replay.tree.leaves.devices()),
            "steps": int(result.state.learner.steps),
            "loss": result.metrics["loss"].tolist(),
            "return": result.metrics["episode_return"].tolist()}
    config = jaxrl_async.load_config("dqn_cartpole", DQN + ["pipeline.devices=2"])
    learner, samples = result.state.learner, [replay_sample(replay)] * 2
    out["learn/dqn"] = {d: learn_steps(config, learner, samples, d) for d in (1, 2)}
    # R2D2: a whole run on two devices, one sequence-replay shard each.
    config = jaxrl_async.load_config("r2d2_cartpole_masked", R2D2_TINY[:-1] + [
        "pipeline.lag=0", "train.prng=threefry2x32", "pipeline.devices=2"])
    result = jaxrl_async.train(config)
    replay = result.state.replay
    out["r2d2-run/2"] = {"sizes": np.asarray(replay.ring.size).tolist(),
                         "shard_devices": len(replay.tree.leaves.devices()),
                         "steps": int(result.state.learner.steps)}
    out["learn/r2d2"] = {d: learn_steps(config, result.state.learner, [replay_sample(replay)], d)
                         for d in (1, 2)}
    # SAC and TD3 on Pendulum batches: six updates cross TD3's policy delay twice.
    for name, config_name, overrides, count in (("sac", "sac_pendulum", SAC, 3),
                                                ("td3", "td3_pendulum", TD3, 6)):
        config = jaxrl_async.load_config(config_name, overrides + ["pipeline.devices=2"])
        _, agent = build_pipeline(config, mesh=make_mesh(1))
        learner = jax.jit(agent.init)(jax.random.key(0))
        samples = [pendulum_sample(seed=i) for i in range(count)]
        out[f"learn/{name}"] = {d: learn_steps(config, learner, samples, d) for d in (1, 2)}
    # The shipped SAC's whole init over both devices: its twin critics' batched orthogonal
    # init once hung here (a batched QR waited for XLA's thread pool while each pool thread
    # held a device's share); a hang now exits in 120 s.
    import faulthandler
    faulthandler.dump_traceback_later(120, exit=True)
    pipe, _ = build_pipeline(jaxrl_async.load_config("sac_pendulum", ["pipeline.devices=2"]),
                             mesh=make_mesh(2))
    critic = jax.jit(pipe.init)(jax.random.key(0, impl="threefry2x32")).learner.critic
    out["sac-init-devices"] = len(jax.block_until_ready(jax.tree.leaves(critic)[0]).devices())
    faulthandler.cancel_dump_traceback_later()
    try:
        jaxrl_async.choose_layout(jaxrl_async.load_config(
            "dqn_cartpole", ["replay.batch_size=130", "env.num_envs=8", "pipeline.devices=4"]))
        errors.append(None)
    except jaxrl_async.ConfigError as e:
        errors.append(str(e))
    out["errors"] = errors
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def runs():
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        env=subprocess_env(devices=4),
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- whole runs: on-policy agents --------------------------------------------------------------


@pytest.mark.parametrize("run, devices", [("ppo-lag0", 2), ("ppo-lag1", 2)])
def test_ppo_same_parameters_as_one_device(runs, run, devices):
    one, many = runs[f"{run}/1"], runs[f"{run}/{devices}"]
    assert len(many["devices"]) == devices and len(one["devices"]) == 1
    # Same envs, same actions: episode statistics agree exactly or to float rounding.
    np.testing.assert_allclose(many["return"], one["return"], rtol=1e-5)
    np.testing.assert_allclose(many["loss"], one["loss"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(many["params"], one["params"], rtol=0, atol=1e-5)
    # ...and training moved them: the comparison is not between two initialisations.
    assert np.abs(np.asarray(one["params"])).sum() > 0


def test_a_sweep_on_two_devices_equals_its_single_run(runs):
    swept, single = runs["sweep/2"], runs["ppo-lag0/2"]
    assert len(swept["devices"]) == 2
    np.testing.assert_allclose(swept["params"], single["params"], atol=1e-5)
    np.testing.assert_allclose(swept["loss"], single["loss"], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["ppo_cartpole", "impala_cartpole"])
def test_recurrent_same_parameters_on_two_devices(runs, name):
    one, two = runs[f"gru-{name}/1"], runs[f"gru-{name}/2"]
    assert one["carry_devices"] == 1 and two["carry_devices"] == 2
    np.testing.assert_allclose(two["loss"], one["loss"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(two["params"], one["params"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(two["carry"], one["carry"], rtol=0, atol=1e-5)


def test_pqn_two_devices_train_what_one_device_trains(runs):
    """The same returns, losses, targets, epsilons and final parameters, to float rounding
    (the gradient and the metrics are averaged over the devices' shares)."""
    one, two = runs["pqn/1"], runs["pqn/2"]
    assert len(two["devices"]) == 2 and len(one["devices"]) == 1
    np.testing.assert_allclose(two["episode_return"], one["episode_return"], rtol=1e-5)
    np.testing.assert_allclose(two["epsilon"], one["epsilon"], rtol=1e-6)
    for key in ("loss", "target_mean"):
        np.testing.assert_allclose(two[key], one[key], rtol=1e-4, atol=1e-6, err_msg=key)
    np.testing.assert_allclose(two["params"], one["params"], rtol=0, atol=1e-5)


# --- off-policy agents: the replay shards and the learner on one batch --------------------------


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


def test_r2d2_keeps_one_sequence_replay_per_device(runs):
    run = runs["r2d2-run/2"]
    assert run["sizes"] == [128, 128] and run["shard_devices"] == 2
    assert run["steps"] == 2 * (1536 // 32 - 4)


def test_the_shipped_sac_initialises_over_two_devices(runs):
    assert runs["sac-init-devices"] == 2


# Per agent: the metrics compared and the tolerance on the state. Two devices average their
# shards' gradients after differentiating: the same sum in another order. Adam can turn a
# rounding difference in a near-zero gradient into a step of up to the learning rate, so the
# continuous-control learners' states agree to about their learning rate.
LEARNERS = [
    pytest.param("dqn", ("loss",), 1e-5, id="dqn"),
    pytest.param("r2d2", ("loss",), 1e-5, id="r2d2"),
    pytest.param("sac", ("loss",), 5e-4, id="sac"),
    pytest.param("td3", ("critic_loss", "actor_loss"), 5e-3, id="td3"),
]


@pytest.mark.parametrize("name, metrics, state_atol", LEARNERS)
def test_learn_on_two_devices_equals_one_device_on_the_whole_batch(runs, name, metrics, state_atol):
    one, two = runs[f"learn/{name}"]["1"], runs[f"learn/{name}"]["2"]
    assert len(one) == len(two) >= 1
    for a, b in zip(one, two):
        np.testing.assert_allclose(b["state"], a["state"], rtol=0, atol=state_atol)
        np.testing.assert_allclose(b["priorities"], a["priorities"], rtol=1e-5, atol=1e-5)
        for key in metrics:
            np.testing.assert_allclose(
                b["metrics"][key], a["metrics"][key], rtol=1e-5, atol=1e-6, err_msg=key
            )
    if name == "td3":  # the actor moves on the third update only (policy_delay 3)
        actor_loss = [step["metrics"]["actor_loss"] for step in one]
        assert actor_loss[2] != actor_loss[1], "update 3 should have moved the actor"
        assert np.abs(np.asarray(one[-1]["state"]) - one[0]["state"]).max() > 1e-3
    if name == "sac":
        assert np.abs(np.asarray(one[-1]["state"]) - one[0]["state"]).max() > 1e-4


def test_batches_that_do_not_split_over_the_devices_are_config_errors(runs):
    errors = runs["errors"]
    assert all(e is not None and "\n" not in e for e in errors), errors
    assert "does not split over 4 devices" in errors[0]
    assert "only 4 local devices" in errors[1]
    assert "actor_devices" in errors[2] and "lag >= 1" in errors[3]
