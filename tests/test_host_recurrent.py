"""Recurrent on-policy agents on host envs (`host/actor.py`): the actor keeps each env's
carry across steps and rounds and hands the learner the trajectory the JAX rollout builds
(`rollout.rollout_step`): every step records the Memory the actor acted from, the carry
before the agent's reset and whether the step starts an episode. The agent's own `learn`
then runs unchanged. Runs do not depend on the actor threads, lag 0 reproduces a run, and
the CLI trains, checkpoints, resumes and evaluates (greedy, with the carry) a GRU run.

The fast runs step the tiny corridor of tests/helpers/host_envs.py with a small GRU PPO.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback

from jaxrl_async.config.loader import load_config
from jaxrl_async.host import make_actor_envs, make_host_agent, run_executor, train_host
from jaxrl_async.run import checkpoint as ckpt
from jaxrl_async.types import ActorClock, Agent
from tests.helpers import host_envs  # noqa: F401  (registers the corridor envs)
from tests.helpers.cli import run_cli_in_process
from tests.helpers.host_runs import bounded, cartpole_final_returns, with_threads

CORRIDOR = "gymnasium:tests.helpers.host_envs:HostCorridor-v0"
GRU = ["agent.memory=gru", "agent.memory_size=8", "agent.hidden_sizes=[8]"]


def gru_config(*overrides: str, rounds: int = 6):
    """GRU PPO: 4 envs x 4 steps a round over 2 actor threads, `rounds` rounds."""
    return load_config(
        "ppo_cartpole",
        [
            f"env.name={CORRIDOR}",
            "env.num_envs=4",
            "pipeline.rollout_len=4",
            "pipeline.actor_threads=2",
            "agent.num_minibatches=2",
            *GRU,
            f"train.total_steps={16 * rounds}",
            *overrides,
        ],
    )


def host_agent(config) -> Agent:
    envs = make_actor_envs(config)
    try:
        return make_host_agent(config, envs[0].spec)
    finally:
        for env in envs:
            env.close()


def recording(agent: Agent, seen: list) -> Agent:
    """`agent` whose learn first hands (the parameters, the trajectory) it was given to
    `seen`, in numpy, then runs the agent's own learn."""

    def learn(state, traj, key):
        io_callback(lambda *args: seen.append(args), None, state.params, traj, ordered=True)
        return agent.learn(state, traj, key)

    return agent._replace(learn=learn)


def rollout_reference(agent: Agent, config, rounds: list) -> None:
    """Replays the recorded rounds (lag 0: round r acted by the parameters learn r was
    given) through the JAX rollout's rule, step by step from every env at an episode's
    start: each step acts from the Memory of the step before (its carry, and an episode
    start where that step terminated or truncated), with env i's key of global step s
    the actor key folded with s, then with i. Asserts that every step's stored Memory,
    action and log-probability are the reference's."""
    batch = config.env.num_envs
    act_key = jax.random.fold_in(jax.random.key(config.train.seed, impl=config.prng_impl), 1)
    index = jnp.arange(batch, dtype=jnp.int32)

    @jax.jit
    def act(params, carry, obs, episode_start, s):
        keys = jax.vmap(jax.random.fold_in, (None, 0))(jax.random.fold_in(act_key, s), index)
        clock = ActorClock(s * batch, index, batch)
        return agent.act(params, carry, obs, episode_start, keys, clock)

    carry, episode_start = jax.device_get(agent.initial_memory(batch))
    length = config.pipeline.rollout_len
    for r, (params, traj) in enumerate(rounds):
        for t in range(length):
            stored = jax.tree.map(lambda x, t=t: x[t], traj.memory)
            np.testing.assert_array_equal(stored.episode_start, episode_start, (r, t))
            np.testing.assert_allclose(stored.carry, carry, rtol=1e-5, atol=1e-6)
            carry, action, extras = jax.device_get(
                act(params, carry, traj.obs[t], episode_start, r * length + t)
            )
            np.testing.assert_array_equal(traj.action[t], action, (r, t))
            np.testing.assert_allclose(traj.extras["log_prob"][t], extras["log_prob"], atol=1e-5)
            episode_start = traj.terminated[t] | traj.truncated[t]


def test_trajectory_is_the_jax_rollouts():
    """The trajectory learn is handed at lag 0 over 2 actor threads: carries kept across
    rounds, reset exactly at episode starts, and the stored carry the one the actor used."""
    config = gru_config("pipeline.lag=0")
    agent, seen = host_agent(config), []
    result = bounded(lambda: run_executor(config, recording(agent, seen), make_actor_envs(config)))
    assert result["updates"] == 6 and len(seen) == 6
    rounds = [(params, traj) for params, traj in seen]
    traj = rounds[0][1]
    assert traj.memory.carry.shape == (4, 4, 8) and traj.memory.episode_start.shape == (4, 4)
    assert traj.memory.episode_start[0].all()  # every env starts an episode
    assert not np.any(traj.memory.carry[0])  # from the agent's init_carry
    starts = np.concatenate([t.memory.episode_start for _, t in rounds])
    ended = np.concatenate([t.terminated | t.truncated for _, t in rounds])
    np.testing.assert_array_equal(starts[1:], ended[:-1])  # across rounds too
    assert ended.any() and (~ended).any()
    # episodes that start after the first step start from a carry the actor had moved on
    carries = np.concatenate([t.memory.carry for _, t in rounds])
    assert np.abs(carries[1:][starts[1:]]).max() > 0
    rollout_reference(agent, config, rounds)


def assert_same_params(first: dict, second: dict) -> None:
    assert first["updates"] == second["updates"]
    for a, b in zip(jax.tree.leaves(first["params"]), jax.tree.leaves(second["params"])):
        np.testing.assert_array_equal(a, b)


def run(config, agent: Agent, threads: int) -> dict:
    config = with_threads(config, threads)
    return bounded(lambda: run_executor(config, agent, make_actor_envs(config)), 120.0)


def test_actor_threads_do_not_change_the_run():
    """Each env's carry is its own: one actor thread or two, the same parameters at lag 1."""
    config = gru_config("pipeline.lag=1")
    agent = host_agent(config)
    assert_same_params(run(config, agent, 1), run(config, agent, 2))


def test_lag0_same_seed_same_parameters():
    config = gru_config("pipeline.lag=0")
    agent = host_agent(config)
    assert_same_params(run(config, agent, 2), run(config, agent, 2))


def test_impala_with_memory_trains_at_lag_1():
    """IMPALA's own learn (V-trace, re-running the cell from the stored carries)."""
    config = load_config(
        "impala_cartpole",
        [f"env.name={CORRIDOR}", "env.num_envs=4", "pipeline.rollout_len=4", *GRU]
        + ["pipeline.lag=1", "pipeline.actor_threads=2", "train.total_steps=96"],
    )
    result = bounded(lambda: train_host(config), 120.0)
    assert result["updates"] == 6 and result["policy_lag_max"] == 1
    assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(result["params"]))


def records(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_gru_run_resume_and_eval_from_the_command_line(tmp_path):
    """A GRU run trains and checkpoints; the resume restarts the carries with the envs
    and continues the counts; greedy and sampled eval carry the memory through."""
    run_dir = tmp_path / "run"
    args = ["ppo_cartpole", f"env.name={CORRIDOR}", "env.num_envs=4", "pipeline.rollout_len=4"]
    args += [*GRU, "agent.num_minibatches=2", "train.log_every=32", "train.progress=false"]
    code, err = run_cli_in_process(
        "train", *args, "train.total_steps=96", "checkpoint.every=64", "--run-dir", str(run_dir),
        cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    assert ckpt.steps(run_dir / "checkpoints")[-1] == 96
    code, err = run_cli_in_process("resume", str(run_dir), "total_steps=160", cwd=tmp_path)
    assert code == 0, err
    assert [r["env_steps"] for r in records(run_dir)] == [32, 64, 96, 128, 160]
    assert all(np.isfinite(r["loss"]) for r in records(run_dir))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["resumed_from"], summary["updates"]) == (96, 10)
    for mode in ("greedy", "sample"):
        code, err = run_cli_in_process(
            "eval", str(run_dir), "--episodes", "3", "--mode", mode, cwd=tmp_path
        )
        assert code == 0, err
        result = json.loads((run_dir / "eval.json").read_text())
        assert result["episodes"] == 3 and result["env_steps"] == 160
        assert all(np.isfinite(result["returns"])) and all(n >= 1 for n in result["lengths"])


@pytest.mark.slow
def test_gru_ppo_learns_gymnasium_cartpole():
    """Three seeds, one after another, at lag 1: recurrent PPO's median final return is
    far above a random policy's (about 22). The learning rate and reward scale of
    ppo_rnn_cartpole_masked: the policy and value heads share the cell."""
    returns = cartpole_final_returns(
        "ppo_cartpole",
        ["env.num_envs=8", "pipeline.rollout_len=128", "agent.memory=gru"]
        + ["agent.memory_size=64", "agent.hidden_sizes=[64]", "agent.learning_rate=1e-3"]
        + ["agent.reward_scale=0.1", "train.total_steps=40000"],
        180.0,
    )
    assert np.median(returns) > 150, returns
