"""train.num_seeds=N: the whole run vmapped over seeds in one program."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import jaxrl_async
from jaxrl_async.pipeline.program import seed_keys
from tests.helpers.configs import PPO_SMALL

TINY = [*PPO_SMALL, "train.seed=5"]


def test_seed_keys_equal_the_single_seed_keys():
    for impl in ("threefry2x32", "philox4x32"):
        keys = seed_keys(5, 3, impl)
        for k in range(3):
            np.testing.assert_array_equal(
                jax.random.key_data(keys[k]), jax.random.key_data(jax.random.key(5 + k, impl=impl))
            )


@pytest.fixture(scope="module")
def three_seeds():
    config = jaxrl_async.load_config("ppo_cartpole", TINY + ["train.num_seeds=3"])
    return jaxrl_async.train(config)


@pytest.mark.parametrize("k", [0, 2])
@pytest.mark.slow
def test_seed_k_equals_a_single_run_with_that_seed(three_seeds, k):
    """Equal up to float rounding (vmapped matmuls may associate differently)."""
    single = jaxrl_async.train(
        jaxrl_async.load_config("ppo_cartpole", TINY[:-1] + [f"train.seed={5 + k}"])
    )
    batched = jax.tree.map(lambda x: x[k], three_seeds.state.learner.params)
    np.testing.assert_allclose(
        ravel_pytree(batched)[0], ravel_pytree(single.state.learner.params)[0], rtol=0, atol=1e-5
    )
    np.testing.assert_allclose(
        three_seeds.metrics[f"episode_return/seed{k}"], single.metrics["episode_return"], rtol=1e-4
    )


@pytest.mark.slow
def test_metrics_per_seed_and_their_mean(three_seeds):
    m, summary = three_seeds.metrics, three_seeds.summary
    per_seed = np.stack([m[f"episode_return/seed{k}"] for k in range(3)])
    np.testing.assert_allclose(m["episode_return"], per_seed.mean(0), rtol=1e-6)
    assert not np.allclose(per_seed[0], per_seed[1]), "seeds should differ"
    assert summary["num_seeds"] == 3 and len(summary["final_return_seeds"]) == 3
    np.testing.assert_allclose(summary["final_return"], np.mean(summary["final_return_seeds"]))
    # sps counts every seed's env steps: the per-seed budget over the train time, times 3.
    assert summary["env_steps"] == 4096
    timed = summary["train_seconds"] - summary["eval_seconds"] - summary["checkpoint_seconds"]
    np.testing.assert_allclose(summary["sps"], 3 * 4096 / timed, rtol=1e-6)


def test_num_seeds_config_errors():
    with pytest.raises(jaxrl_async.ConfigError, match="num_seeds"):
        jaxrl_async.load_config("ppo_cartpole", ["train.num_seeds=0"])
    with pytest.raises(jaxrl_async.ConfigError, match="num_seeds"):
        jaxrl_async.load_config("ppo_cartpole", ["train.num_seeds=2", "eval.every=1000"])


@pytest.mark.slow  # a fresh process (or several) that compiles and trains
def test_vmapped_seeds_of_an_off_policy_run_in_a_fresh_process_cannot_hang(tmp_path):
    """XLA's concurrency-optimized CPU scheduler can deadlock vmapped programs with
    collectives; the package turns it off at import. A fresh process (default flags,
    2 forced devices, DQN with replay, 2 seeds, through the CLI) must finish in time."""
    script = textwrap.dedent("""
        import sys
        from jaxrl_async.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    args = [
        "train",
        "dqn_cartpole",
        "train.num_seeds=2",
        "env.num_envs=4",
        "pipeline.rollout_len=4",
        "agent.hidden_sizes=[16]",
        "replay.capacity=256",
        "replay.batch_size=32",
        "replay.learning_starts=64",
        "train.total_steps=2048",
        "train.log_every=512",
        "train.progress=false",
        "pipeline.devices=2",
        "--run-dir",
        str(tmp_path / "run"),
    ]
    proc = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["num_seeds"] == 2 and len(summary["devices"]) == 2
    assert "xla_cpu_enable_concurrency_optimized_scheduler=false" in summary["xla_flags"]
