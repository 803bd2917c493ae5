"""The xminigrid adapter (`xminigrid:<id>`) against xminigrid's own API: the same
observations and rewards for the same keys and actions, goal (terminated) versus
max_steps (truncated), auto-reset, XLand rule sets and one-line errors."""

import urllib.error

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async

xminigrid = pytest.importorskip("xminigrid")

from xminigrid import benchmarks
from xminigrid.core.constants import TILES_REGISTRY, Colors, Tiles
from xminigrid.core.goals import AgentNearGoal
from xminigrid.core.rules import EmptyRule

from jaxrl_async.envs import suites
from jaxrl_async.envs.spec import check_env
from jaxrl_async.errors import ConfigError, UserError
from tests.helpers.learning import assert_learns, random_return

FORWARD, RIGHT, LEFT = 0, 1, 2  # xminigrid's actions: move, turn clockwise, turn back


def rollout(env, params, key, actions):
    """The adapter from reset(key): one step per action, one key each."""
    reset_key, step_keys = jax.random.split(key)
    step_keys = jax.random.split(step_keys, len(actions))

    @jax.jit
    def run(reset_key, step_keys, actions):
        obs, state = env.reset(reset_key, params)

        def body(state, x):
            k, a = x
            obs, state, reward, terminated, truncated, info = env.step(k, state, a, params)
            return state, (obs, reward, terminated, truncated, info["final_observation"])

        return obs, jax.lax.scan(body, state, (step_keys, actions))[1]

    return reset_key, step_keys, run(reset_key, step_keys, actions)


def suite_rollout(env, params, reset_key, step_keys, actions):
    """The same with xminigrid's API: reset(params, key), step(params, timestep, action),
    and reset(params, step key) where a step is LAST."""

    @jax.jit
    def run(reset_key, step_keys, actions):
        first = env.reset(params, reset_key)

        def body(timestep, x):
            k, a = x
            ended = env.step(params, timestep, a)
            done = ended.last()
            restart = env.reset(params, k)
            timestep = jax.tree.map(lambda r, s: jnp.where(done, r, s), restart, ended)
            return timestep, (
                timestep.observation,
                ended.reward,
                done & (ended.discount == 0),
                done & (ended.discount > 0),
                ended.observation,
            )

        return first.observation, jax.lax.scan(body, first, (step_keys, actions))[1]

    return run(reset_key, step_keys, actions)


def assert_trees_equal(a, b):
    jax.tree.map(np.testing.assert_array_equal, a, b)


@pytest.mark.slow
def test_empty_random_matches_xminigrid_across_truncations_and_restarts():
    env, params = suites.make("xminigrid:MiniGrid-EmptyRandom-8x8", max_steps=4)
    assert params.max_steps == 4 and env.default_params is params
    spec = check_env(env, params)
    assert (spec.obs_shape, spec.obs_dtype, spec.num_actions) == ((7, 7, 2), np.uint8, 6)
    actions = jnp.array([FORWARD, LEFT, FORWARD, RIGHT] * 3, jnp.int32)
    reset_key, step_keys, (first_obs, out) = rollout(env, params, jax.random.key(5), actions)
    obs, reward, terminated, truncated, final = out
    assert reward.dtype == jnp.float32 and terminated.dtype == truncated.dtype == jnp.bool_

    suite, suite_params = xminigrid.make("MiniGrid-EmptyRandom-8x8", max_steps=4)
    expected = suite_rollout(suite, suite_params, reset_key, step_keys, actions)
    assert_trees_equal((first_obs, out), expected)

    # Every 4th step is the limit: truncated (bootstrap), with the limit's observation final.
    assert truncated.tolist() == [False, False, False, True] * 3 and not terminated.any()
    ends = np.flatnonzero(truncated)
    assert all(not np.array_equal(obs[t], final[t]) for t in ends)
    # EmptyRandom's reset is random: the episodes start from different places.
    starts = [first_obs, *obs[ends]]
    assert all(not np.array_equal(a, b) for i, a in enumerate(starts) for b in starts[i + 1 :])


def test_reaching_the_goal_terminates_and_the_next_episode_starts_afresh():
    """Empty-5x5: the agent starts at (1, 1) facing right, the goal is at (3, 3)."""
    env, params = suites.make("xminigrid:MiniGrid-Empty-5x5")
    actions = jnp.array([FORWARD, FORWARD, RIGHT, FORWARD, FORWARD, LEFT], jnp.int32)
    _, _, (first_obs, (obs, reward, terminated, truncated, final)) = rollout(
        env, params, jax.random.key(0), actions
    )
    assert terminated.tolist() == [False] * 4 + [True, False] and not truncated.any()
    # xminigrid's reward for the goal: 1 - 0.9 * steps / max_steps (100 here).
    np.testing.assert_allclose(reward, [0, 0, 0, 0, 1 - 0.9 * 5 / params.max_steps, 0], rtol=1e-6)
    np.testing.assert_array_equal(obs[4], first_obs)  # Empty's reset is fixed
    assert not np.array_equal(final[4], obs[4])


def test_check_env_accepts_other_layouts():
    for env_id, view in (("MiniGrid-DoorKey-5x5", 7), ("MiniGrid-MemoryS8", 3)):
        env, params = suites.make(f"xminigrid:{env_id}")
        assert check_env(env, params).obs_shape == (view, view, 2)
    env, params = suites.make("xminigrid:MiniGrid-Empty-5x5", view_size=5)
    assert check_env(env, params).obs_shape == (5, 5, 2)


def one_line_error(error_type, *args, **kwargs):
    with pytest.raises(error_type) as info:
        suites.make(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_an_xland_benchmark_on_a_minigrid_env_is_a_one_line_config_error():
    assert "MiniGrid-Empty-8x8" in suites.adapter("xminigrid").ids()
    assert "XLand" in one_line_error(
        ConfigError, "xminigrid:MiniGrid-Empty-5x5", benchmark="trivial-21k"
    )


@pytest.fixture
def benchmark_dir(tmp_path, monkeypatch):
    """An empty xminigrid data directory, and no network: a download fails at once."""
    monkeypatch.setattr(benchmarks, "DATA_PATH", str(tmp_path))

    def offline(url, *args, **kwargs):
        raise urllib.error.URLError("offline")

    monkeypatch.setattr(benchmarks.urllib.request, "urlretrieve", offline)
    return tmp_path


def test_xland_needs_a_benchmark_rule_set(benchmark_dir):
    """XLand ids come with an empty rule set (no goal); a benchmark provides one, and
    a benchmark that cannot be downloaded is a one-line UserError."""
    name = "xminigrid:XLand-MiniGrid-R1-9x9"
    assert "trivial-21k" in one_line_error(ConfigError, name)
    assert "unknown xminigrid benchmark" in one_line_error(ConfigError, name, benchmark="nope")
    message = one_line_error(UserError, name, benchmark="trivial-21k")
    assert "cannot load xminigrid benchmark 'trivial-21k'" in message and "offline" in message

    # A two-rule-set stand-in for the download: "go next to a red (or blue) ball".
    balls = [TILES_REGISTRY[Tiles.BALL, color] for color in (Colors.RED, Colors.BLUE)]
    benchmarks.save_bz2_pickle(
        {
            "goals": jnp.stack([AgentNearGoal(tile=ball).encode() for ball in balls]),
            "rules": jnp.stack([EmptyRule().encode()[None]] * 2),
            "init_tiles": jnp.stack([ball[None] for ball in balls]),
            "num_rules": jnp.zeros(2, jnp.uint8),
        },
        str(benchmark_dir / benchmarks.NAME2HFFILENAME["trivial-21k"]),
    )
    env, params = suites.make(name, benchmark="trivial-21k", ruleset=1)
    np.testing.assert_array_equal(params.ruleset.init_tiles, balls[1][None])
    assert check_env(env, params).obs_shape == (5, 5, 2)
    assert "rule sets 0..1" in one_line_error(ConfigError, name, benchmark="trivial-21k", ruleset=2)


def test_direct_is_the_suites_own_reset_and_step():
    """`direct` (bench's adapter-overhead baseline): xminigrid's reset and step for one env
    under jit, the TimeStep as the state, no auto-reset."""
    reset, step = suites.adapter("xminigrid").direct("MiniGrid-Empty-5x5", max_steps=1)
    timestep = jax.jit(step)(
        jax.random.key(1), jax.jit(reset)(jax.random.key(0)), jnp.int32(FORWARD)
    )
    assert timestep.state.agent.position.tolist() == [1, 2] and timestep.last()
    # No auto-reset: the limit's LAST step is returned as it is.
    assert int(timestep.state.step_num) == 1


@pytest.mark.slow
def test_ppo_solves_empty_5x5_by_name():
    """`env.name=xminigrid:MiniGrid-Empty-5x5`, 4 seeds in one program, 49,152 steps. The
    optimum is 0.955 (the goal in 5 steps; reward 1 - 0.9 * steps / 100); uniformly random
    actions score far less (checked below). The budget leaves room after the seeds reach
    the threshold, 0.9."""
    env, params = suites.make("xminigrid:MiniGrid-Empty-5x5")
    random, episodes = random_return(env, params, num_envs=256, steps=512)
    assert episodes >= 256, episodes
    assert 0.1 < random < 0.4, random
    config = jaxrl_async.load_config(
        "ppo_cartpole",
        [
            "env.name=xminigrid:MiniGrid-Empty-5x5",
            "env.num_envs=16",
            "pipeline.rollout_len=32",
            "agent.learning_rate=1e-3",
            "train.total_steps=49152",
            "train.log_every=4096",
            "train.num_seeds=4",
            "train.progress=false",
        ],
    )
    assert_learns(jaxrl_async.train(config), 0.9, min_passing=3)
