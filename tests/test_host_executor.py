"""The host envs' actor–learner executor (`jaxrl_async.host.executor`): exact version
tags at lag 0, 1 and 2, staleness skips, failures and stops that end every thread in
bounded time, lag-0 reproducibility, and PPO learning CartPole through Gymnasium.

The fast tests run a probe agent (tests/helpers/host_probe.py) whose parameters count the
updates applied, so each trajectory shows which parameters acted it, on the tiny corridor
of tests/helpers/host_envs.py.
"""

from __future__ import annotations

import re
import threading
import time

import jax
import numpy as np
import pytest

from jaxrl_async.config.loader import load_config
from jaxrl_async.errors import ConfigError
from jaxrl_async.host import (
    ActorError,
    make_actor_envs,
    make_host_agent,
    record_hook,
    run_executor,
    train_host,
)
from tests.helpers import host_envs  # noqa: F401  (registers the corridor envs)
from tests.helpers.host_probe import make_probe_agent
from tests.helpers.host_runs import BOUND, bounded, cartpole_final_returns, with_threads

CORRIDOR = "gymnasium:HostCorridor-v0"


def corridor_config(*overrides: str, rounds: int = 8):
    """4 envs x 4 steps a round over 2 actor threads, `rounds` rounds."""
    return load_config(
        "ppo_cartpole",
        [
            f"env.name={CORRIDOR}",
            "env.num_envs=4",
            "pipeline.rollout_len=4",
            "agent.hidden_sizes=[8]",
            "agent.num_minibatches=2",
            "pipeline.actor_threads=2",
            f"train.total_steps={16 * rounds}",
            *overrides,
        ],
    )


def actor_threads_alive() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("host-actor")]


def run_probe(config, stop=None):
    records: list[dict] = []
    envs = make_actor_envs(config)
    result = bounded(
        lambda: run_executor(
            config, make_probe_agent(), envs, hooks=[record_hook(records.append)], stop=stop
        )
    )
    return result, records


@pytest.mark.parametrize("lag", [0, 1, 2])
def test_version_tags_exact(lag):
    """Round r is acted by the parameters of update max(0, r - lag), on every step of every
    actor's trajectory, and those are the parameters that acted (the probe's counter)."""
    result, records = run_probe(corridor_config(f"pipeline.lag={lag}"))
    assert [rec["round"] for rec in records] == list(range(8))
    for r, rec in enumerate(records):
        acted = max(0, r - lag)
        assert rec["versions"] == [[acted], [acted]], r
        for key in ("version_min", "version_max", "acted_min", "acted_max"):
            assert rec[key] == acted, (r, key)
        assert rec["learner_version"] == r
        assert rec["policy_lag"] == min(r, lag)
    assert result["updates"] == 8 and result["env_steps"] == 128
    assert result["policy_lag_max"] == lag and not result["stopped_early"]
    assert not actor_threads_alive()


def test_max_staleness_skips_as_the_jax_pipeline():
    """Lag 2 with max_staleness 1: updates on data 2 updates old are skipped, leaving the
    version where it was, as `ticks.make_learn` does."""
    _, records = run_probe(corridor_config("pipeline.lag=2", "pipeline.max_staleness=1"))
    slot_version, updates = {0: 0}, 0
    for r, rec in enumerate(records):
        version = slot_version[max(0, r - 2)]
        skipped = updates - version > 1
        assert rec["versions"] == [[version], [version]], r
        assert rec["skipped_updates"] == float(skipped), r
        updates += 0 if skipped else 1
        assert rec["updates"] == updates
        slot_version[r + 1] = updates
    assert any(rec["skipped_updates"] for rec in records)


@pytest.mark.parametrize("failure", ["raise", "nan_obs", "nan_reward"])
def test_actor_failure_ends_the_run_in_one_line(failure):
    config = corridor_config(
        "env.name=gymnasium:HostFaulty-v0",
        "env.kwargs.fail_at=10",
        f"env.kwargs.failure={failure}",
        rounds=10_000,
    )
    start = time.perf_counter()
    with pytest.raises(ActorError, match=r"^env gymnasium:HostFaulty-v0: actor \d raised") as e:
        run_probe(config)
    assert "\n" not in str(e.value)
    assert ("broke at step 10" if failure == "raise" else "non-finite") in str(e.value)
    assert time.perf_counter() - start < BOUND
    assert not actor_threads_alive()


@pytest.mark.parametrize(
    ("env", "broken", "line"),
    [
        (
            "HostMisshapen-v0",
            "obs",
            "returned an observation of shape (3,), dtype float64; "
            "its observation_space declares (2,), float32",
        ),
        (
            "HostMisshapen-v0",
            "final_obs",
            "returned a final observation (info['final_obs']) of shape (3,), dtype float64; "
            "its observation_space declares (2,), float32",
        ),
        ("HostMisshapen-v0", "reward", "returned a reward that is not one number (ValueError: "),
        (
            "HostMisshapenVector-v0",
            "obs",
            "returned observations of shape (2, 1), dtype float32 for its 2 envs; "
            "its observation_space declares (2,), float32 for each",
        ),
        (
            "HostMisshapenVector-v0",
            "rewards",
            "returned rewards of shape (2, 1), dtype float64 for its 2 envs; "
            "one per env is shape (2,)",
        ),
    ],
)
def test_env_that_breaks_its_spaces_is_named_with_what_it_gave(env, broken, line):
    """An env whose observation or reward stops fitting its declared spaces mid-run ends
    the run in one line naming the env, the actor, what it returned and what it declares
    (a Gymnasium env batched by a sync vector env; a vector env of its own)."""
    own = ["env.kwargs.vectorization_mode=vector_entry_point"] if "Vector" in env else []
    config = corridor_config(
        f"env.name=gymnasium:{env}",
        "env.kwargs.break_at=10",
        f"env.kwargs.broken={broken}",
        *own,
        rounds=10_000,
    )
    with pytest.raises(ActorError) as e:
        run_probe(config)
    assert re.match(rf"env gymnasium:{env} \(actor \d\) {re.escape(line)}", str(e.value)), e.value
    assert "\n" not in str(e.value)
    assert not actor_threads_alive()


def test_stop_event_ends_every_thread():
    stop = threading.Event()
    config = corridor_config("pipeline.lag=1", rounds=100_000)
    records: list[dict] = []

    def stop_at_five(record):
        records.append(record)
        if record["round"] == 4:
            stop.set()

    envs = make_actor_envs(config)
    start = time.perf_counter()
    result = bounded(
        lambda: run_executor(
            config, make_probe_agent(), envs, hooks=[record_hook(stop_at_five)], stop=stop
        )
    )
    assert time.perf_counter() - start < BOUND
    assert result["stopped_early"] and result["rounds"] == 5 == len(records)
    assert not actor_threads_alive()


def run_ppo(config, agent, actor_threads: int) -> dict:
    config = with_threads(config, actor_threads)
    envs = make_actor_envs(config)
    return bounded(lambda: run_executor(config, agent, envs), 120.0)


def assert_same_params(first: dict, second: dict) -> None:
    assert first["updates"] == second["updates"] == 8
    for a, b in zip(jax.tree.leaves(first["params"]), jax.tree.leaves(second["params"])):
        np.testing.assert_array_equal(a, b)


def test_lag0_same_seed_same_parameters():
    """PPO at lag 0 with two actor threads: two runs of a seed end in identical parameters."""
    config = corridor_config("pipeline.lag=0")
    envs = make_actor_envs(config)
    agent = make_host_agent(config, envs[0].spec)
    envs[0].close()
    assert_same_params(run_ppo(config, agent, 2), run_ppo(config, agent, 2))


def test_actor_threads_do_not_change_the_run():
    """Env i resets from seed + i and draws from its global index's key, so PPO at lag 1
    ends in the same parameters with one actor thread or two."""
    config = corridor_config("pipeline.lag=1")
    envs = make_actor_envs(config)
    agent = make_host_agent(config, envs[0].spec)
    envs[0].close()
    assert_same_params(run_ppo(config, agent, 1), run_ppo(config, agent, 2))


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["pipeline.actor_threads=5"], "actor_threads=5 exceeds env.num_envs=4"),
        (["eval.every=64", "eval.video=true"], "eval.video is not supported"),
        (["pipeline.devices=3"], "num_envs=4 does not split over 3 learner devices"),
        (
            ["pipeline.placement=split", "pipeline.lag=1", "pipeline.actor_devices=2"],
            "split acts on one device",
        ),
    ],
)
def test_refused_in_one_line_when_loaded(overrides, match):
    with pytest.raises(ConfigError, match=match) as e:
        corridor_config(*overrides)
    assert "\n" not in str(e.value)


def test_actor_threads_refused_for_jax_envs():
    with pytest.raises(ConfigError, match="actor_threads applies to host envs"):
        load_config("ppo_cartpole", ["pipeline.actor_threads=2"])


def test_impala_trains_at_lag_1():
    """IMPALA's own learn (V-trace over the behaviour log-probabilities) on the tags."""
    config = load_config(
        "impala_cartpole",
        [f"env.name={CORRIDOR}", "env.num_envs=4", "pipeline.rollout_len=4"]
        + ["agent.hidden_sizes=[8]", "pipeline.lag=1", "train.total_steps=128"],
    )
    config = with_threads(config, 2)
    result = bounded(lambda: train_host(config), 120.0)
    assert result["updates"] == 8 and result["policy_lag_max"] == 1
    assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(result["params"]))


def test_ppo_builds_as_a_host_agent():
    config = corridor_config()
    envs = make_actor_envs(config)
    try:
        agent = make_host_agent(config, envs[0].spec)
    finally:
        envs[0].close()
    assert agent.data == "trajectory" and not agent.recurrent


@pytest.mark.slow
def test_ppo_learns_gymnasium_cartpole():
    """Three seeds, one after another, at lag 1: the median final return is far above a
    random policy's (about 22)."""
    returns = cartpole_final_returns(
        "ppo_cartpole",
        ["env.num_envs=8", "pipeline.rollout_len=128", "train.total_steps=100000"],
        120.0,
    )
    assert np.median(returns) > 150, returns


def test_split_placement_on_one_device_refused_in_one_line():
    config = corridor_config("pipeline.placement=split", "pipeline.lag=1")
    with pytest.raises(ConfigError, match="placement=split needs 2 devices") as e:
        make_actor_envs(config)
    assert "\n" not in str(e.value)


SPLIT_SCRIPT = """
import json, jax, numpy as np
from jaxrl_async.config.loader import load_config
from jaxrl_async import train
from tests.helpers import host_envs
assert jax.device_count() == 2
out = {}
for placement in ("fused", "split"):
    config = load_config("ppo_cartpole", ["env.name=gymnasium:HostCorridor-v0",
        "env.num_envs=4", "pipeline.rollout_len=4", "agent.hidden_sizes=[8]",
        "agent.num_minibatches=2", "train.total_steps=128", "pipeline.lag=1",
        "train.progress=false", f"pipeline.placement={placement}"])
    result = train(config)
    out[placement] = {"devices": result.summary["devices"],
        "params": [np.asarray(x).tolist() for x in jax.tree.leaves(result.state.params)]}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_split_placement_acts_and_learns_on_two_devices_with_the_same_arithmetic():
    """Two forced CPU devices: split puts the actors on the first and the learner on the
    last, and trains the parameters the fused run trains."""
    from tests.helpers.cli import script_json

    out = script_json(SPLIT_SCRIPT, devices=2)
    assert len(out["fused"]["devices"]) == 1 and len(out["split"]["devices"]) == 2
    for a, b in zip(out["fused"]["params"], out["split"]["params"], strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_timed_rounds_end_with_the_last_not_with_closing_the_envs():
    """SPS, cores busy and the CPU bound time the rounds from the first's end to the
    last's: envs that take a second each to close (after the last round, with the actor
    threads) lengthen the run's train_seconds, not its timed rounds."""
    slow = "gymnasium:tests.helpers.host_envs:HostSlowClose-v0"
    config = corridor_config(f"env.name={slow}", "env.kwargs={close_seconds: 1.0}")
    result = train_host(config)
    timed = (result["env_steps"] - config.batch_size) / result["sps"]
    # each actor thread closes its 2 envs, one after the other, after its last round
    assert result["compile_seconds"] + timed <= result["train_seconds"] - 1.5, result
    busy_cpu = result["cores_busy"] * timed  # CPU seconds over the same window
    assert busy_cpu * 0.999 <= timed * result["cores"]
    assert result["cpu_bound_sps"] == pytest.approx(
        result["sps"] * result["cores"] / result["cores_busy"], rel=1e-6
    )
