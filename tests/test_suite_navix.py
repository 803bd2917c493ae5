"""The navix adapter (`navix:<id>`) against navix's own reset/step: the same observations
and rewards for the same keys and actions, with the reset that navix defers to the step
after an episode end done within the ending step; the episode ends told apart."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async
from jaxrl_async.envs import suites
from jaxrl_async.envs.spec import check_env
from jaxrl_async.errors import ConfigError
from tests.helpers.learning import assert_learns, random_return

pytest.importorskip("navix")

LIMIT = 7
# Empty-5x5: the player starts at (1, 1) facing east, the goal is at (3, 3). Forward,
# forward, turn right, forward, forward reaches it (terminated, reward 1); then seven
# left turns run into the time limit (truncated); then two more steps.
FORWARD, LEFT, RIGHT = 2, 0, 1
ACTIONS = np.array(
    [FORWARD, FORWARD, RIGHT, FORWARD, FORWARD] + [LEFT] * LIMIT + [FORWARD] * 2, np.int32
)
TERMINATED_AT, TRUNCATED_AT = 4, 4 + LIMIT
GOAL, PLAYER = (3, 3), 10  # a position and the player's tag in the symbolic observation


def run_adapter(env, params, keys, actions):
    """The adapter over `actions` in one jitted scan: the first obs and per-step outputs."""

    @jax.jit
    def run(keys, actions):
        obs, state = env.reset(keys[0], params)

        def step(state, xs):
            key, action = xs
            obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)
            return state, (obs, reward, terminated, truncated, info["final_observation"])

        return obs, jax.lax.scan(step, state, (keys[1:], actions))[1]

    return jax.device_get(run(keys, jnp.asarray(actions)))


@pytest.fixture(scope="module")
def empty():
    env, params = suites.make("navix:Navix-Empty-5x5-v0", max_steps=LIMIT)
    # philox4x32: the PRNG a one-device run hands the env (`train.prng=auto`).
    keys = jax.random.split(jax.random.key(5, impl="philox4x32"), len(ACTIONS) + 1)
    return env, params, keys, run_adapter(env, params, keys, ACTIONS)


def navix_reference(navix_env, keys):
    """navix itself, one call at a time: reset with the first key, then `step`; where an
    episode ends, the reset navix would do on the next step is done at once, from that
    step's key (the adapter's key derivation)."""
    reset, step = jax.jit(navix_env.reset), jax.jit(navix_env.step)
    timestep = reset(keys[0])
    first, rows = np.asarray(timestep.observation), []
    for key, action in zip(keys[1:], ACTIONS):
        timestep = step(timestep, jnp.asarray(action))
        reward, final = float(timestep.reward), np.asarray(timestep.observation)
        terminated, truncated = bool(timestep.step_type == 2), bool(timestep.step_type == 1)
        if terminated or truncated:
            timestep = reset(key)
        rows.append((np.asarray(timestep.observation), reward, terminated, truncated, final))
    return first, [np.stack(column) for column in zip(*rows)]


def test_matches_navix_step_by_step_across_both_kinds_of_episode_end(empty):
    env, _, keys, (first, outputs) = empty
    ref_first, reference = navix_reference(env.env, keys)
    np.testing.assert_array_equal(first, ref_first)
    for name, got, want in zip(
        ["obs", "reward", "terminated", "truncated", "final_obs"], outputs, reference
    ):
        np.testing.assert_array_equal(got, want, err_msg=name)
    obs, reward, terminated, truncated, _ = outputs
    assert obs.dtype == np.uint8 and reward.dtype == np.float32
    assert terminated.dtype == truncated.dtype == np.bool_


def test_goal_terminates_time_limit_truncates_with_their_final_observations(empty):
    _, params, _, (first, (obs, reward, terminated, truncated, final_obs)) = empty
    assert params.max_steps_in_episode == LIMIT
    assert np.flatnonzero(terminated).tolist() == [TERMINATED_AT]
    assert np.flatnonzero(truncated).tolist() == [TRUNCATED_AT]
    assert np.flatnonzero(reward).tolist() == [TERMINATED_AT] and reward[TERMINATED_AT] == 1
    assert final_obs[TERMINATED_AT][GOAL][0] == PLAYER  # the last obs: the player on the goal
    # Empty-5x5 always starts the same: both ends are followed by that start at once.
    for end in (TERMINATED_AT, TRUNCATED_AT):
        np.testing.assert_array_equal(obs[end], first)
        assert not np.array_equal(final_obs[end], first)
    running = ~(terminated | truncated)
    np.testing.assert_array_equal(final_obs[running], obs[running])


@pytest.mark.slow
def test_every_episode_starts_from_its_own_random_state():
    env, params = suites.make("navix:Navix-Empty-Random-5x5-v0", max_steps=1)
    keys = jax.random.split(jax.random.key(0, impl="philox4x32"), 9)
    first, (obs, _, _, truncated, _) = run_adapter(env, params, keys, np.full(8, LEFT, np.int32))
    assert truncated.all()  # a one-step limit: every step starts a new episode
    starts = np.concatenate([first[None], obs])
    assert len({o.tobytes() for o in starts}) >= 5, "9 episodes from under 5 distinct starts"
    # Each from the key of the step that ended the one before, as navix resets from it.
    np.testing.assert_array_equal(starts, jax.vmap(env.env.reset)(keys).observation)


@pytest.mark.parametrize(
    "env_id, kwargs",
    [
        ("Navix-Empty-5x5-v0", {}),
        ("Navix-Empty-5x5-v0", {"observation_fn": "rgb"}),
        ("Navix-DoorKey-5x5-v0", {}),
        ("Navix-Dynamic-Obstacles-5x5-v0", {}),  # its state carries a key of its own
        ("Navix-LavaGapS5-v0", {}),
    ],
)
def test_check_env(env_id, kwargs):
    env, params = suites.make(f"navix:{env_id}", **kwargs)
    spec = check_env(env, params)
    assert spec.discrete and spec.num_actions == 7
    assert env_id in suites.adapter("navix").ids()


def test_an_unknown_observation_fn_is_a_one_line_error():
    with pytest.raises(ConfigError, match="observation_fn") as info:
        suites.make("navix:Navix-Empty-5x5-v0", observation_fn="nope")
    assert "\n" not in str(info.value)


def test_direct_is_navix_own_reset_and_step(empty):
    """`direct` (bench's suite-API baseline): navix's reset and step, one env, jitted."""
    env, params, keys, _ = empty
    reset, step = suites.adapter("navix").direct("Navix-Empty-5x5-v0", max_steps=LIMIT)
    timestep = jax.jit(reset)(keys[0])
    stepped = jax.jit(step)(keys[1], timestep, jnp.int32(FORWARD))
    assert (
        timestep.observation.shape
        == stepped.observation.shape
        == env.observation_space(params).shape
    )
    np.testing.assert_array_equal(
        stepped.observation, env.env.step(env.env.reset(keys[0]), FORWARD).observation
    )


@pytest.mark.slow
def test_ppo_learns_to_reach_the_goal_by_name():
    """`env.name=navix:Navix-Empty-5x5-v0` trains: 4 seeds in one program, 40,960 steps.

    Reward 1 on reaching the goal (navix's default, no time penalty), so a return is a
    success rate; a 20-step limit leaves a random walk a few percent (checked below on
    thousands of episodes). Observations are normalised: navix's symbolic tags are uint8
    values up to 10, which the encoder scales by 1/255, and unnormalised some seeds'
    policies became state-independent before ever reaching the goal. The budget leaves
    room after the seeds solve.
    """
    kwargs = {"max_steps": 20}
    random, episodes = random_return(*suites.make("navix:Navix-Empty-5x5-v0", **kwargs), steps=2000)
    assert episodes > 5000 and random < 0.1, (random, episodes)
    config = jaxrl_async.load_config(
        "ppo_cartpole",
        [
            "env.name=navix:Navix-Empty-5x5-v0",
            "env.kwargs.max_steps=20",
            "env.num_envs=16",
            "env.normalize_obs=true",
            "pipeline.rollout_len=32",
            "agent.learning_rate=5e-4",
            "train.total_steps=40960",
            "train.log_every=8192",
            "train.num_seeds=4",
            "train.progress=false",
        ],
    )
    assert_learns(jaxrl_async.train(config), 0.9, min_passing=3)
