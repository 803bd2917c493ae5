"""End-to-end training: learning, determinism, compile-once, the run directory."""

import json
import math
import signal

import jax
import numpy as np
import pytest

import jaxrl_async
from tests.helpers.configs import PPO_SMALL
from tests.helpers.learning import assert_learns, curves
from tests.helpers.probe_envs import MatchContext

# One small config shared by the tests below, the CLI test and other files, so the suite
# compiles it once (in-process cache) and the CLI subprocess finds it in the persistent cache.
SMALL = PPO_SMALL


@pytest.fixture(scope="module")
def small_config():
    return jaxrl_async.load_config("ppo_cartpole", SMALL)


# The default PRNG on one CPU device (train.prng=auto); the figures below hold for threefry2x32
# too, whose streams the IMPALA lag-1 and multi-device tests run under.
@pytest.mark.slow
def test_ppo_solves_cartpole(prng="philox4x32"):
    """The reference config at its shipped budget: 3 of 4 seeds and the median reach 475.
    A shorter budget leaves too many seeds short to rest a test on.
    """
    config = jaxrl_async.load_config(
        "ppo_cartpole",
        [
            "train.total_steps=500000",
            "train.num_seeds=4",
            f"train.prng={prng}",
            "train.progress=false",
        ],
    )
    result = jaxrl_async.train(config)
    assert_learns(result, 475.0, min_passing=3)
    first = curves(result)[:, 0]
    assert np.all(first < 200), f"the first log point should be far from solved: {first}"


@pytest.mark.slow
def test_trains_custom_env_to_its_optimum(prng="threefry2x32"):
    """PPO on the MatchContext probe env (optimum 8): 7 of 8 seeds and the median reach 97%.
    The budget is twice the one at which seeds end too close to the threshold.
    """
    config = jaxrl_async.load_config(
        "ppo_cartpole",
        [
            "env.num_envs=8",
            "pipeline.rollout_len=16",
            "agent.hidden_sizes=[16]",
            "agent.learning_rate=3e-3",
            "agent.ent_coef=0.0",
            "train.total_steps=10240",
            "train.log_every=512",
            "train.num_seeds=8",
            f"train.prng={prng}",
            "train.progress=false",
        ],
    )
    result = jaxrl_async.train(config, env=MatchContext())
    optimum = MatchContext().default_params.episode_length
    assert_learns(result, 0.97 * optimum, min_passing=7)
    first = curves(result)[:, 0]
    assert np.all(first < 0.8 * optimum), f"the first log point should be near chance: {first}"


def _numpy(x):
    """Arrays as numpy, typed PRNG keys as their raw key data."""
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)


@pytest.mark.slow
def test_same_seed_gives_identical_metrics_and_params(small_config):
    a = jaxrl_async.train(small_config)
    b = jaxrl_async.train(small_config)
    assert a.metrics.keys() == b.metrics.keys()
    for key in a.metrics:
        if key in ("sps", "wall_seconds"):
            continue
        np.testing.assert_array_equal(a.metrics[key], b.metrics[key], err_msg=key)
    for x, y in zip(jax.tree.leaves(a.state), jax.tree.leaves(b.state)):
        np.testing.assert_array_equal(_numpy(x), _numpy(y))
    other = jaxrl_async.train(jaxrl_async.load_config("ppo_cartpole", SMALL + ["train.seed=1"]))
    assert not np.array_equal(a.metrics["loss"], other.metrics["loss"])


@pytest.mark.slow
def test_second_chunk_call_does_not_compile(small_config):
    from jaxrl_async.pipeline.build import build_pipeline

    pipeline, _ = build_pipeline(small_config)
    state = jax.jit(pipeline.init)(jax.random.key(0, impl=small_config.prng_impl))
    chunk = jax.jit(pipeline.chunk(2), donate_argnums=0)

    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, duration, **kw: (
            compiles.append(event)
            if event == "/jax/compilation_cache/compile_time_saved_sec"
            or event.endswith("backend_compile_duration")
            else None
        )
    )
    state, _ = chunk(state)
    jax.block_until_ready(state)
    first = len(compiles)
    assert first >= 1, "the first call must compile (or load) the chunk"
    for _ in range(3):
        state, _ = chunk(state)
    jax.block_until_ready(state)
    assert len(compiles) == first, "later calls recompiled the chunk"
    assert int(state.updates) == 8


@pytest.mark.slow
def test_cli_train_writes_run_directory(cli, tmp_path):
    run_dir = tmp_path / "run"
    proc = cli(
        "train",
        "ppo_cartpole",
        *SMALL,
        "train.progress=true",
        "--run-dir",
        str(run_dir),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    summary_line = proc.stdout.strip().splitlines()[-1]
    assert "4,096 steps" in summary_line and "SPS" in summary_line and str(run_dir) in summary_line
    assert "4.10k/4.10k" in proc.stderr, "the progress bar did not reach the end"
    assert (run_dir / "config.yaml").is_file()
    reloaded = jaxrl_async.load_config(run_dir / "config.yaml")
    assert reloaded.env.num_envs == 4 and reloaded.agent.hidden_sizes == (16, 16)
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["env_steps"] for r in records] == [1024, 2048, 3072, 4096]
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in (
        "env_steps",
        "sps",
        "final_return",
        "compile_seconds",
        "wall_seconds",
        "jax_version",
        "devices",
    ):
        assert key in summary, key
    assert summary["env_steps"] == 4096 and summary["sps"] > 0
    assert math.isfinite(summary["final_return"])
    assert list(run_dir.glob("events.out.tfevents.*")), "no TensorBoard event file"


@pytest.mark.slow  # a fresh process (or several) that compiles and trains
def test_second_start_loads_programs_from_the_compile_cache(cli, tmp_path):
    cache = tmp_path / "xla-cache"
    summaries = []
    for attempt in range(2):
        run_dir = tmp_path / f"run{attempt}"
        proc = cli(
            "train",
            *SMALL,
            "--run-dir",
            str(run_dir),
            cwd=tmp_path,
            env={"JAX_COMPILATION_CACHE_DIR": str(cache)},
        )
        assert proc.returncode == 0, proc.stderr
        summaries.append(json.loads((run_dir / "summary.json").read_text()))
    cold, warm = summaries
    assert cold["compile_cache_hits"] == 0 and cold["compile_cache_misses"] >= 2
    assert warm["compile_cache_misses"] == 0 and warm["compile_cache_hits"] >= 2
    assert any(cache.iterdir())
    assert cold["final_return"] == warm["final_return"]


@pytest.mark.parametrize(
    "num_updates,target,expected",
    [
        (976, 61, (61, 16)),
        (976, 64, (61, 16)),
        (12, 100, (12, 1)),
        (97, 10, (10, 9)),
        (1, 8, (1, 1)),
        (100, 7, (5, 20)),
    ],
)
def test_plan_calls_tiles_the_run_with_one_program(num_updates, target, expected):
    from jaxrl_async.training.plan import plan_calls

    ticks, calls = plan_calls(num_updates, target)
    assert (ticks, calls) == expected
    assert ticks * calls <= num_updates and num_updates - ticks * calls < target


@pytest.mark.slow  # a fresh process that compiles and trains
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_cli_interrupt_exits_130_after_the_current_call(cli, tmp_path, signum):
    """The run stops after the current host call with a checkpoint there, and resumes."""
    import subprocess
    import sys
    import time

    from jaxrl_async.run import checkpoint

    run_dir = tmp_path / "run"
    # No LR annealing: the resume to a new total runs the program the first run compiled.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jaxrl_async",
            "train",
            *SMALL,
            "train.total_steps=50000000",
            "agent.anneal_lr=false",
            "--run-dir",
            str(run_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert (
        err.strip().splitlines()[-1]
        == f"jaxrl-async: interrupted; resume with: jaxrl-async resume {run_dir}"
    )
    assert "Traceback" not in err
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    stopped = records[-1]["env_steps"]
    assert stopped < 50_000_000
    assert checkpoint.steps(run_dir / "checkpoints") == [stopped]
    if signum != signal.SIGINT:
        return
    # 50M steps run in host calls of 5 ticks (640 steps): resume for two more of them.
    proc = cli("resume", str(run_dir), f"total_steps={stopped + 1280}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["env_steps"] for r in records] == list(range(640, stopped + 1281, 640))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == stopped + 1280 and summary["resumed_from"] == stopped
