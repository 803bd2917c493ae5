"""A host env's learner over a device mesh: PPO on Gymnasium's CartPole with its rounds'
envs split over two learner devices trains what one learner device trains, fused and
split (one actor device in front of the mesh), fresh and resumed, memoryless and with a
GRU; a run checkpointed on two evaluates on one; the device counts the host executor does
not run are refused in one line.

JAX fixes its device count when it starts, so the runs share one subprocess with
XLA_FLAGS=--xla_force_host_platform_device_count=3 (the fused runs use the first one or
two devices, the split run all three); it prints one JSON line.
"""

import textwrap

import numpy as np
import pytest

import jaxrl_async
from tests.helpers.cli import run_cli, run_cli_in_process, script_json

SCRIPT = textwrap.dedent("""
    import json, shutil, sys
    from pathlib import Path
    import jax, numpy as np
    from jax.flatten_util import ravel_pytree
    import jaxrl_async
    from jaxrl_async.host.placement import host_layout
    from jaxrl_async.run import checkpoint as ckpt

    assert jax.device_count() == 3, jax.devices()
    SMALL = ["env.num_envs=4", "pipeline.rollout_len=16", "agent.hidden_sizes=[16]",
             "agent.num_minibatches=2", "agent.num_epochs=2", "train.log_every=128",
             "train.progress=false", "train.prng=philox4x32", "pipeline.lag=1"]
    METRICS = ("loss", "value_loss", "entropy", "approx_kl", "episode_return")
    tmp = Path(sys.argv[1])

    def kept(result):
        return {"params": np.asarray(ravel_pytree(result.state.params)[0]).tolist(),
                **{k: result.metrics[k].tolist() for k in METRICS},
                "devices": result.summary["devices"],
                "placement": result.summary["placement"]}

    def train(overrides, run_dir=None):
        config = jaxrl_async.load_config("ppo_gymnasium_cartpole", SMALL + overrides)
        return jaxrl_async.train(config, run_dir=run_dir)

    out = {}
    for name, layout in (("fused/1", ["pipeline.devices=1"]),
                         ("fused/2", ["pipeline.devices=2"]),
                         ("split/2", ["pipeline.placement=split", "pipeline.devices=2"])):
        out[name] = kept(train(layout + ["train.total_steps=512"]))
    # Recurrent: the trajectory's carries split over the devices with its envs.
    GRU = ["agent.memory=gru", "agent.memory_size=8", "train.total_steps=256"]
    for devices in (1, 2):
        out[f"gru/{devices}"] = kept(train(GRU + [f"pipeline.devices={devices}"]))
    # Two seeds side by side: the vmapped learners' envs split over the devices.
    for devices in (1, 2):
        out[f"seeds/{devices}"] = kept(train(["train.num_seeds=2", "train.total_steps=256",
                                              f"pipeline.devices={devices}"]))
    # Checkpointed on one and on two learner devices, then resumed on each.
    for devices in (1, 2):
        run = tmp / f"run{devices}"
        train([f"pipeline.devices={devices}", "train.total_steps=256",
               "checkpoint.every=128"], run)
        meta = ckpt.read_meta(run / "checkpoints")[1]
        resumed = jaxrl_async.resume(run, ["train.total_steps=512"])
        out[f"resumed/{devices}"] = {**kept(resumed), "meta_devices": meta["devices"],
                                     "resumed_from": resumed.summary["resumed_from"]}
    # The layout a host run's plan carries (training/plan.py's plan_host).
    split = jaxrl_async.load_config("ppo_gymnasium_cartpole",
                                    SMALL + ["pipeline.placement=split", "pipeline.devices=2"])
    layout = host_layout(split)
    out["layout/split/2"] = [layout.devices, layout.learner_devices, layout.actor_devices]
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory):
    """Where the subprocess writes its checkpointed runs ("run1", "run2")."""
    return tmp_path_factory.mktemp("mesh")


@pytest.fixture(scope="module")
def runs(run_dirs):
    """The subprocess's runs, by name ("fused/1", "fused/2", "split/2", "resumed/N")."""
    return script_json(SCRIPT, str(run_dirs), devices=3)


def assert_same_run(a: dict, b: dict) -> None:
    """Parameters and every compared metric equal to float rounding (NaN where no
    episode ended, in both)."""
    np.testing.assert_allclose(a["params"], b["params"], rtol=1e-5, atol=1e-6)
    for key in ("loss", "value_loss", "entropy", "approx_kl", "episode_return"):
        np.testing.assert_allclose(a[key], b[key], rtol=1e-4, atol=1e-6, err_msg=key)


@pytest.mark.slow  # a fresh Python process
def test_two_learner_devices_train_what_one_trains(runs):
    assert_same_run(runs["fused/1"], runs["fused/2"])
    assert runs["fused/1"]["devices"] == ["cpu:0"]
    assert runs["fused/2"]["devices"] == ["cpu:0", "cpu:1"]


@pytest.mark.slow  # a fresh Python process
def test_a_recurrent_learner_on_two_devices_trains_what_one_trains(runs):
    assert_same_run(runs["gru/1"], runs["gru/2"])


@pytest.mark.slow  # a fresh Python process
def test_split_acts_on_the_first_device_and_learns_on_two_others(runs):
    assert_same_run(runs["fused/1"], runs["split/2"])
    assert runs["split/2"]["devices"] == ["cpu:0", "cpu:1", "cpu:2"]
    assert runs["split/2"]["placement"] == "split"


@pytest.mark.slow  # a fresh Python process
def test_a_checkpoint_of_two_learner_devices_resumes_on_them(runs):
    """The checkpoint holds the replicated state once; restored into a fresh state and
    placed on the mesh, the resumed run trains what a resumed one-device run trains."""
    assert runs["resumed/2"]["resumed_from"] == 256
    assert runs["resumed/2"]["devices"] == ["cpu:0", "cpu:1"]
    assert_same_run(runs["resumed/1"], runs["resumed/2"])


@pytest.mark.slow  # a fresh Python process
def test_a_run_of_two_learner_devices_evaluates_on_one(runs, run_dirs, tmp_path):
    """`jaxrl-async eval` in this process (one CPU device) of the run checkpointed on
    two: evaluation needs no mesh."""
    code, err = run_cli_in_process("eval", str(run_dirs / "run2"), "--episodes", "2", cwd=tmp_path)
    assert code == 0, err


@pytest.mark.slow  # a fresh Python process
def test_the_split_layout_counts_the_actor_device_and_the_learner_mesh(runs):
    """`host_layout` (what plan_host must carry): devices spanned, learner's, acting."""
    assert runs["layout/split/2"] == [3, 2, 1]


@pytest.mark.slow  # a fresh Python process
def test_two_seeds_on_two_learner_devices_train_what_they_train_on_one(runs):
    """train.num_seeds=2: the seeds' vmapped learners over the mesh, each seed's envs
    split over its devices."""
    assert runs["seeds/2"]["devices"] == ["cpu:0", "cpu:1"]
    assert_same_run(runs["seeds/1"], runs["seeds/2"])


@pytest.mark.slow  # a fresh Python process
def test_a_checkpoint_records_the_learner_devices(runs):
    assert (runs["resumed/1"]["meta_devices"], runs["resumed/2"]["meta_devices"]) == (1, 2)


@pytest.mark.slow  # a fresh Python process
def test_envs_that_do_not_split_over_the_learner_devices_exit_2_in_one_line(tmp_path):
    done = run_cli(
        "train",
        "ppo_gymnasium_cartpole",
        "env.num_envs=6",
        "pipeline.devices=4",
        "--run-dir",
        str(tmp_path / "run"),
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "env.num_envs=6 does not split over 4 learner devices" in lines[0]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("name", "overrides", "match"),
    [
        ("dqn_cartpole", ["pipeline.devices=2"], "off-policy learner runs on one device"),
        (  # IMPALA's minibatches are groups of each learner device's envs
            "impala_cartpole",
            ["pipeline.devices=2", "env.num_envs=8", "agent.num_minibatches=8"],
            "num_minibatches=8 does not divide env.num_envs=8 / 2 devices",
        ),
        (
            "ppo_gymnasium_cartpole",
            ["pipeline.placement=split", "pipeline.actor_devices=2"],
            "split acts on one device",
        ),
    ],
)
def test_device_counts_the_host_executor_does_not_run_are_refused_when_loaded(
    name, overrides, match
):
    overrides = [*overrides, "env.name=gymnasium:CartPole-v1"]
    with pytest.raises(jaxrl_async.ConfigError, match=match) as e:
        jaxrl_async.load_config(name, overrides)
    assert "\n" not in str(e.value)


def test_more_learner_devices_than_the_machine_has_is_refused_in_one_line():
    """The test process has one CPU device (tests/conftest.py)."""
    config = jaxrl_async.load_config(
        "ppo_gymnasium_cartpole", ["pipeline.devices=2", "train.progress=false"]
    )
    with pytest.raises(jaxrl_async.ConfigError, match="needs 2 devices, this machine has 1"):
        jaxrl_async.train(config)
