"""The resume contract, once for every agent family: a run interrupted at its first log
point and resumed ends in the uninterrupted run's state, leaf for leaf, with the same log
records, checkpoints and summary."""

import json

import numpy as np
import pytest

import jaxrl_async
from jaxrl_async.run import checkpoint as ckpt
from tests.helpers.configs import DQN_TINY, PPO_SMALL, PQN_LAG1, R2D2_TINY
from tests.helpers.resume import assert_same_records, assert_same_state, interrupt_at, records

# Each case trains its config twice and resumes it once: whole compiled training programs.
pytestmark = pytest.mark.slow


def _r2d2_replay_is_full_and_learning(reference):
    # 4 envs x 8 steps a tick, two sequences of 8 per env per tick (384 in all, the last
    # 256 kept); two updates a tick from the 5th tick on (128 steps).
    replay = reference.state.replay
    assert int(replay.ring.size[0]) == 256
    assert replay.ring.items.carry.shape == (1, 256, 8)
    assert int(reference.state.learner.steps) == 2 * (1536 // 32 - 4)


def _td3_actor_moves_every_third_update(reference):
    learner = reference.state.learner
    # 4 envs x 4 steps a tick: 96 ticks, 2 updates a tick once 64 steps are stored.
    assert int(learner.steps) == 2 * (96 - 4)
    assert int(learner.actor_opt_state[1]) == 2 * (96 - 4) // 3


# TD3 with tiny networks, lag 1, prioritized replay wrapped by the end, 2 updates a tick
# against a delay of 3 (so the delay phase crosses ticks and checkpoints). No periodic
# evaluation: its compile would double the test's cost, and it only calls `greedy`.
TD3_RESUME = [
    "agent.hidden_sizes=[8]",
    "agent.updates_per_tick=2",
    "agent.policy_delay=3",
    "pipeline.rollout_len=4",
    "pipeline.lag=1",
    "replay.kind=prioritized",
    "replay.capacity=256",
    "replay.batch_size=16",
    "replay.learning_starts=64",
    "train.total_steps=1536",
    "train.log_every=512",
    "train.progress=false",
]

# Each is a program another test trains too where it can be (PPO_SMALL; test_dqn's
# DQN_TINY at lag 2; test_seeds' three seeds; test_pqn's PQN_LAG1), so it comes from the
# compile cache.
RESUME_CONFIGS = [
    pytest.param("ppo_cartpole", PPO_SMALL, None, id="ppo-lag0"),
    pytest.param("ppo_cartpole_async", PPO_SMALL, None, id="ppo-lag1"),
    # Prioritized replay (full and wrapped by the end), its sum tree, the n-step window and
    # two queued parameter versions too.
    pytest.param("dqn_cartpole", DQN_TINY + ["pipeline.lag=2"], None, id="dqn-per"),
    pytest.param("ppo_cartpole", PPO_SMALL + ["train.num_seeds=3"], None, id="ppo-3-seeds"),
    # The actor's carry (and the carries stored with the trajectory in flight).
    pytest.param(
        "ppo_cartpole_async",
        PPO_SMALL + ["agent.memory=gru", "agent.memory_size=8", "agent.hidden_sizes=[8]"],
        None,
        id="ppo-gru-lag1",
    ),
    # The parameters, the optimizer, the parameter queue and the trajectory in flight.
    pytest.param("pqn_cartpole", PQN_LAG1, None, id="pqn-lag1"),
    # The sequence replay, its priorities, the window, the LSTM carries and the queue.
    pytest.param(
        "r2d2_cartpole_masked", R2D2_TINY, _r2d2_replay_is_full_and_learning, id="r2d2-lag1"
    ),
    # The actor's own optimizer and the policy delay's phase across checkpoints.
    pytest.param(
        "td3_pendulum", TD3_RESUME, _td3_actor_moves_every_third_update, id="td3-per-lag1"
    ),
]


@pytest.mark.parametrize("name, overrides, check_reference", RESUME_CONFIGS)
def test_resume_after_interrupt_equals_the_uninterrupted_run(
    tmp_path, name, overrides, check_reference
):
    config = jaxrl_async.load_config(name, overrides)
    reference = jaxrl_async.train(config, run_dir=tmp_path / "reference")
    if check_reference is not None:
        check_reference(reference)
    log_points = [int(s) for s in reference.metrics["env_steps"]]
    assert len(log_points) >= 3

    run_dir = tmp_path / "run"
    with pytest.raises(jaxrl_async.TrainingInterrupted) as info:
        jaxrl_async.train(config, run_dir=run_dir, callbacks=[interrupt_at(log_points[0])])
    # The signal came while logging the first call; the second, already running, finishes
    # and is saved.
    stopped = log_points[1]
    assert info.value.env_steps == stopped and info.value.run_dir == run_dir
    assert ckpt.steps(run_dir / "checkpoints") == [stopped]
    assert [r["env_steps"] for r in records(run_dir)] == log_points[:2]

    resumed = jaxrl_async.resume(run_dir)
    assert_same_state(resumed.state, reference.state)
    assert_same_records(records(run_dir), records(tmp_path / "reference"))
    assert resumed.metrics.keys() == reference.metrics.keys()
    for key in reference.metrics:
        if key not in ("sps", "wall_seconds"):
            np.testing.assert_array_equal(resumed.metrics[key], reference.metrics[key], err_msg=key)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["resumed_from"] == stopped and summary["env_steps"] == log_points[-1]
    assert summary["final_return"] == reference.summary["final_return"]
    assert ckpt.steps(run_dir / "checkpoints") == [stopped, log_points[-1]]
