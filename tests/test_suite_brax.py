"""The brax adapter (`brax:<name>`) against brax's own reset/step: the same observations
and rewards for the same keys and actions, the episode ends told apart, fresh resets."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async
from jaxrl_async.envs import suites
from jaxrl_async.envs.spec import check_env
from jaxrl_async.errors import ConfigError
from tests.helpers.learning import assert_learns

pytest.importorskip("brax")

LIMIT = 6
# Six steps without force (the pole stays up: a time limit), then full force (the pole
# passes 0.2 rad on the second step: terminated), then a few more.
ACTIONS = np.array([0.0] * LIMIT + [1.0] * 2 + [0.0] * 3, np.float32)[:, None]
TRUNCATED_AT, TERMINATED_AT = LIMIT - 1, LIMIT + 1


@pytest.fixture(scope="module")
def pendulum():
    return suites.make("brax:inverted_pendulum", episode_length=LIMIT)


@pytest.fixture(scope="module")
def adapter_run(pendulum):
    """The adapter over ACTIONS in one jitted scan: its reset obs and per-step outputs."""
    env, params = pendulum
    # philox4x32: the PRNG a one-device run hands the env (`train.prng=auto`).
    keys = jax.random.split(jax.random.key(3, impl="philox4x32"), len(ACTIONS) + 1)

    @jax.jit
    def run(keys, actions):
        obs, state = env.reset(keys[0], params)

        def step(state, xs):
            key, action = xs
            obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)
            return state, (obs, reward, terminated, truncated, info["final_observation"])

        return obs, jax.lax.scan(step, state, (keys[1:], actions))[1]

    return keys, *jax.device_get(run(keys, jnp.asarray(ACTIONS)))


def brax_reference(brax_env, keys, limit):
    """What brax itself gives, one call at a time: reset with the first key, step, and
    after an episode end (done, or `limit` steps) reset with that step's key."""
    reset, step = jax.jit(brax_env.reset), jax.jit(brax_env.step)
    state, t = reset(keys[0]), 0
    first, rows = np.asarray(state.obs), []
    for key, action in zip(keys[1:], ACTIONS):
        state, t = step(state, jnp.asarray(action)), t + 1
        terminated = bool(state.done > 0)
        truncated = t >= limit and not terminated
        reward, final = float(state.reward), np.asarray(state.obs)
        if terminated or truncated:
            state, t = reset(key), 0
        rows.append((np.asarray(state.obs), reward, terminated, truncated, final))
    return first, [np.stack(column) for column in zip(*rows)]


@pytest.mark.slow
def test_matches_brax_step_by_step_across_both_kinds_of_episode_end(pendulum, adapter_run):
    env, _ = pendulum
    keys, first, (obs, reward, terminated, truncated, final_obs) = adapter_run
    ref_first, (ref_obs, ref_reward, ref_term, ref_trunc, ref_final) = brax_reference(
        env.env, keys, LIMIT
    )
    np.testing.assert_allclose(first, ref_first, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(obs, ref_obs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(final_obs, ref_final, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(reward, ref_reward)
    np.testing.assert_array_equal(terminated, ref_term)
    np.testing.assert_array_equal(truncated, ref_trunc)
    assert reward.dtype == np.float32 and terminated.dtype == truncated.dtype == np.bool_


@pytest.mark.slow
def test_time_limit_is_truncated_a_fall_terminated_with_their_final_observations(adapter_run):
    _, _, (obs, _, terminated, truncated, final_obs) = adapter_run
    assert np.flatnonzero(truncated).tolist() == [TRUNCATED_AT]
    assert np.flatnonzero(terminated).tolist() == [TERMINATED_AT]
    # The last observation of the fallen episode: the pole past 0.2 rad; the next
    # observation is a fresh start (brax resets within ±0.01 of upright).
    assert abs(final_obs[TERMINATED_AT, 1]) > 0.2
    for end in (TRUNCATED_AT, TERMINATED_AT):
        assert np.abs(obs[end]).max() <= 0.01 and not np.allclose(obs[end], final_obs[end])
    running = ~(terminated | truncated)
    np.testing.assert_array_equal(final_obs[running], obs[running])


@pytest.mark.slow
def test_every_episode_starts_from_its_own_random_state(adapter_run):
    _, first, (obs, *_) = adapter_run
    starts = [first, obs[TRUNCATED_AT], obs[TERMINATED_AT]]
    for i in range(3):
        for j in range(i):
            assert not np.allclose(starts[i], starts[j])


def test_spec_and_the_episode_length_error(pendulum):
    env, params = pendulum
    spec = check_env(env, params)
    assert spec.obs_shape == (4,) and spec.action_shape == (1,) and not spec.discrete
    assert params.max_steps_in_episode == LIMIT
    with pytest.raises(ConfigError, match="episode_length") as info:
        suites.make("brax:inverted_pendulum", episode_length=0)
    assert "\n" not in str(info.value)


# The mean return of uniformly random actions at a 200-step limit on the spring backend
# (`tests.helpers.learning.random_return`, 64 envs x 1,000 steps).
RANDOM_RETURN = 22.7


@pytest.mark.slow
def test_ppo_learns_to_balance_the_pendulum_by_name():
    """`env.name=brax:inverted_pendulum` trains: 3 seeds in one program, 65,536 steps,
    the median and 2 of 3 seeds to 150 of 200, over 6x what random actions get. A seed
    can end just short of 150 on another float rounding, hence 2 of 3. The spring backend
    of the shipped config: brax's default (generalized) learns as well but compiles several
    times longer, so only test_env_traces checks that it traces inside the pipeline.
    """
    assert 6 * RANDOM_RETURN < 150.0
    config = jaxrl_async.load_config(
        "ppo_pendulum",
        [
            "env.name=brax:inverted_pendulum",
            "env.kwargs.episode_length=200",
            "env.kwargs.backend=spring",
            "env.num_envs=16",
            "agent.gamma=0.99",
            "agent.reward_scale=1.0",
            "train.total_steps=65536",
            "train.log_every=8192",
            "train.num_seeds=3",
            "train.progress=false",
        ],
    )
    assert_learns(jaxrl_async.train(config), 150.0, min_passing=2)


@pytest.mark.slow
def test_direct_is_brax_own_reset_and_plain_step():
    """`direct` (bench's suite-API baseline): brax's reset and step, one env, jitted. On
    the spring backend, whose step compiles and runs eagerly several times faster than
    the default's (the suite's time)."""
    env, _ = suites.make("brax:inverted_pendulum", backend="spring", episode_length=LIMIT)
    reset, step = suites.adapter("brax").direct(
        "inverted_pendulum", backend="spring", episode_length=LIMIT
    )
    key = jax.random.key(0)
    state = jax.jit(reset)(key)
    stepped = jax.jit(step)(key, state, jnp.ones(1))
    assert state.obs.shape == stepped.obs.shape == env.observation_space().shape
    np.testing.assert_allclose(
        stepped.obs, env.env.step(env.env.reset(key), jnp.ones(1)).obs, rtol=1e-5, atol=1e-6
    )
