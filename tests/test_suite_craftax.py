"""The Craftax adapter (`craftax:<id>`) against Craftax's own reset/step: the same
observations and rewards for the same keys and actions, the time limit (folded into
Craftax's `done`) told apart from a death, fresh worlds after every reset.

Craftax compiles slowly (its step is a large program), so the adapter runs unjitted here:
its step calls Craftax's own jitted reset and step, which the reference calls too, and
each compiles once for the whole file. Jitted, the adapter is traced by check_env.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async
from jaxrl_async.envs import suites
from jaxrl_async.envs.spec import check_env
from tests.helpers.learning import assert_learns

pytest.importorskip("craftax")

LIMIT = 3
NOOP, LAVA = 0, 14  # Craftax-Classic's Action.NOOP and BlockType.LAVA
ACTIONS = [3, 5, 1, 0, 4, 2, 5]  # up, do, left, noop, down, right, do: two time limits
TRUNCATED_AT = [LIMIT - 1, 2 * LIMIT - 1]


@pytest.fixture(scope="module")
def classic():
    env, params = suites.make("craftax:Craftax-Classic-Symbolic-v1", max_timesteps=LIMIT)
    # philox4x32: the PRNG a one-device run hands the env (`train.prng=auto`).
    keys = jax.random.split(jax.random.key(7, impl="philox4x32"), len(ACTIONS) + 1)
    # Jitted: one program each compiles faster than Craftax's step op by op.
    reset, step = jax.jit(env.reset), jax.jit(env.step)
    obs, state = reset(keys[0], params)
    first, rows = np.asarray(obs), []
    for key, action in zip(keys[1:], ACTIONS):
        obs, state, reward, terminated, truncated, info = step(
            key, state, jnp.int32(action), params
        )
        rows.append((obs, reward, terminated, truncated, info["final_observation"]))
    return env, params, keys, first, [np.stack(column) for column in zip(*rows)]


def craftax_reference(craftax_env, params, keys):
    """Craftax itself, one call at a time: reset with the first key; each step splits its
    key into (step, reset) as Craftax's auto-reset does, and resets with the second
    where `done`."""

    def reset(key):
        obs, state = craftax_env.reset(key, params)
        # The same types the adapter's state has (values unchanged), so that Craftax's
        # jitted step is not compiled a second time for a weakly typed leaf.
        return obs, jax.tree.map(
            lambda x: (
                x
                if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
                else jnp.asarray(x, x.dtype)
            ),
            state,
        )

    obs, state = reset(keys[0])
    first, rows = np.asarray(obs), []
    for key, action in zip(keys[1:], ACTIONS):
        step_key, reset_key = jax.random.split(key)
        obs, state, reward, done, _ = craftax_env.step(step_key, state, jnp.int32(action), params)
        final = np.asarray(obs)
        if done:
            obs, state = reset(reset_key)
        rows.append((np.asarray(obs), float(reward), bool(done), final))
    return first, [np.stack(column) for column in zip(*rows)]


@pytest.mark.slow
def test_matches_craftax_step_by_step_across_time_limits(classic):
    env, params, keys, first, (obs, reward, terminated, truncated, final_obs) = classic
    ref_first, (ref_obs, ref_reward, ref_done, ref_final) = craftax_reference(
        env.env, params.suite, keys
    )
    np.testing.assert_array_equal(first, ref_first)
    np.testing.assert_array_equal(obs, ref_obs)
    np.testing.assert_array_equal(final_obs, ref_final)
    np.testing.assert_array_equal(reward, ref_reward)
    np.testing.assert_array_equal(terminated | truncated, ref_done)
    assert obs.dtype == reward.dtype == np.float32
    assert terminated.dtype == truncated.dtype == np.bool_


@pytest.mark.slow
def test_time_limit_truncates_with_the_final_observation_and_a_fresh_world(classic):
    _, params, _, first, (obs, _, terminated, truncated, final_obs) = classic
    assert params.max_steps_in_episode == LIMIT
    assert not terminated.any() and np.flatnonzero(truncated).tolist() == TRUNCATED_AT
    starts = [first, *obs[TRUNCATED_AT]]
    for i in range(len(starts)):
        for j in range(i):
            assert not np.array_equal(starts[i], starts[j]), "two worlds alike"
    running = ~truncated
    np.testing.assert_array_equal(final_obs[running], obs[running])
    for end in TRUNCATED_AT:
        assert not np.array_equal(final_obs[end], obs[end])


@pytest.mark.parametrize("timestep", [0, LIMIT - 1])
@pytest.mark.slow
def test_stepping_into_lava_terminates_even_on_the_last_step(classic, timestep):
    """No random policy dies in a few steps: a crafted state puts the player on lava
    (Craftax-Classic ends the game there), at the start or on the limit's last step."""
    env, params, keys, *_ = classic
    _, state = env.reset(keys[0], params)
    x, y = np.asarray(state.player_position)
    state = state.replace(map=state.map.at[x, y].set(LAVA), timestep=jnp.int32(timestep))
    obs, _, _, terminated, truncated, info = env.step(keys[1], state, jnp.int32(NOOP), params)
    assert bool(terminated) and not bool(truncated)
    craftax_obs = env.env.step(jax.random.split(keys[1])[0], state, jnp.int32(NOOP), params.suite)[
        0
    ]
    np.testing.assert_array_equal(info["final_observation"], craftax_obs)
    np.testing.assert_array_equal(obs, env.reset(jax.random.split(keys[1])[1], params)[0])


@pytest.mark.parametrize(
    "env_id",
    [
        "Craftax-Classic-Symbolic-v1",
        pytest.param("Craftax-Symbolic-v1", marks=pytest.mark.slow),
        # The first use of a Pixels env turns Craftax's textures into a cache in its own
        # package directory (about a minute each); later uses read the cache. One of the two
        # Pixels envs (the same code path) keeps a fresh install's test run short.
        pytest.param("Craftax-Classic-Pixels-v1", marks=pytest.mark.slow),
    ],
)
def test_check_env(env_id):
    env, params = suites.make(f"craftax:{env_id}")
    spec = check_env(env, params)
    assert spec.discrete and spec.num_actions == (17 if "Classic" in env_id else 43)
    assert len(spec.obs_shape) == (3 if "Pixels" in env_id else 1)
    assert env_id in suites.adapter("craftax").ids()


@pytest.mark.slow
def test_direct_is_craftax_own_auto_resetting_env(classic):
    """`direct` (bench's suite-API baseline): Craftax's auto-reset env, one env. Its step
    is Craftax's own, traced here, not compiled: a Craftax step program takes seconds to
    compile, and the adapter's tests above run Craftax's step already."""
    env, params, keys, *_ = classic
    reset, step = suites.adapter("craftax").direct(
        "Craftax-Classic-Symbolic-v1", max_timesteps=LIMIT
    )
    state = jax.jit(reset)(keys[0])
    stepped = jax.eval_shape(step, keys[1], state, jnp.int32(NOOP))
    assert jax.tree.structure(stepped) == jax.tree.structure(state)
    assert jax.tree.map(lambda x: (x.shape, x.dtype), stepped) == jax.tree.map(
        lambda x: (x.shape, x.dtype), state
    )
    # The adapter's reset draws the same world from the same key.
    np.testing.assert_array_equal(state.map, env.reset(keys[0], params)[1].map)


# The mean return of uniformly random actions (`tests.helpers.learning.random_return`,
# 128 envs x 3,000 steps).
RANDOM_RETURN = 1.44


@pytest.mark.slow
def test_ppo_beats_random_play_by_name():
    """`env.name=craftax:Craftax-Classic-Symbolic-v1` trains: 3 seeds in one program,
    32,768 steps, each seed a whole achievement's reward above random play. Far from solving
    Craftax: it shows the adapter trains, not a result.
    """
    config = jaxrl_async.load_config(
        "ppo_cartpole",
        [
            "env.name=craftax:Craftax-Classic-Symbolic-v1",
            "env.num_envs=32",
            "pipeline.rollout_len=64",
            "agent.learning_rate=5e-4",
            "agent.gae_lambda=0.8",
            "agent.hidden_sizes=[64,64]",
            "agent.activation=relu",
            "train.total_steps=32768",
            "train.log_every=8192",
            "train.num_seeds=3",
            "train.progress=false",
        ],
    )
    assert_learns(jaxrl_async.train(config), RANDOM_RETURN + 1.0, min_passing=3)
