"""TD3 (agents/td3.py): target policy smoothing and its clip, the twin-min target against
a numpy reference, the actor and the targets moving every `policy_delay`-th update with an
Adam of their own, acting and greedy actions, bad settings, and learning Pendulum over
several seeds in one program (its resume is test_resume.py's, its devices
test_multidevice.py's)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import jaxrl_async
from jaxrl_async.agents.td3 import make_td3, smoothed_target_action
from jaxrl_async.config.agents import TD3Config
from jaxrl_async.envs import make, spec_of
from jaxrl_async.errors import ConfigError
from jaxrl_async.types import BuildContext
from tests.helpers.cli import run_cli_in_process
from tests.helpers.learning import assert_learns, curves
from tests.helpers.references import (
    critics_np,
    dense_layers,
    mlp_np,
    pendulum_sample,
    pendulum_spec,
)

TINY = TD3Config(hidden_sizes=(16, 16), learning_rate=3e-3)


def build(config=TINY, axis_name=None):
    return make_td3(
        config,
        BuildContext(
            pendulum_spec(), num_envs=4, rollout_len=1, num_updates=10, axis_name=axis_name
        ),
    )


make_sample = pendulum_sample


def actor_np(params, obs, depth):
    """The deterministic tanh actor in float64 numpy: (-1, 1)^A."""
    return np.tanh(mlp_np(dense_layers(params["params"], depth), np.asarray(obs, np.float64)))


def spread_out(state):
    """The state with a target actor and target critics apart from the online ones, and an
    actor head large enough to use the whole (-1, 1) range, so that mix-ups show."""
    params = jax.tree.map(lambda x: x, state.params)
    head = params["params"]["Dense_0"]
    params["params"]["Dense_0"] = {"kernel": 150.0 * head["kernel"], "bias": head["bias"]}
    return state.replace(
        params=params,
        target_params=jax.tree.map(lambda x: 0.8 * x - 0.01, params),
        target_critic=jax.tree.map(lambda x: 1.1 * x + 0.01, state.critic),
    )


def td_reference(state, sample, key, config, half=2.0, noise_clip=None):
    """TD errors [2, b] of the critic step `learn(state, sample, key)` takes, in float64
    numpy, and its targets [b]. Shared with the implementation is only its documented
    noise: sample i's smoothing draw is normal(fold_in(key, i))."""
    depth = len(config.hidden_sizes)
    items = sample.items
    b, action_dim = items.action.shape
    eps = np.stack(
        [np.asarray(jax.random.normal(jax.random.fold_in(key, i), (action_dim,))) for i in range(b)]
    ).astype(np.float64)
    clip = config.noise_clip if noise_clip is None else noise_clip
    smoothing = np.clip(config.policy_noise * eps, -clip, clip)
    next_action = np.clip(
        actor_np(state.target_params, items.next_obs, depth) + smoothing, -1.0, 1.0
    )
    next_q = critics_np(state.target_critic, items.next_obs, next_action, depth).min(0)
    target = (
        config.reward_scale * np.asarray(items.reward, np.float64)
        + np.asarray(items.discount, np.float64) * next_q
    )
    q = critics_np(state.critic, items.obs, np.asarray(items.action, np.float64) / half, depth)
    return q - target, target


# --- target policy smoothing and the twin-min target --------------------------------------


def test_smoothing_noise_is_clipped_to_noise_clip_and_actions_to_the_bounds():
    n = 20_000
    target = jnp.tile(jnp.linspace(-1.0, 1.0, 101, dtype=jnp.float32), n // 100 + 1)[:n, None]
    noise = jax.random.normal(jax.random.key(0), (n, 1))
    for policy_noise, clip in ((5.0, 0.3), (0.2, 0.5), (1.0, 0.0)):
        out = np.asarray(smoothed_target_action(target, noise, policy_noise, clip), np.float64)
        t, raw = np.asarray(target, np.float64), policy_noise * np.asarray(noise, np.float64)
        assert out.min() >= -1.0 and out.max() <= 1.0
        shift = out - t
        assert np.abs(shift).max() <= clip + 1e-6, (policy_noise, clip, np.abs(shift).max())
        # Away from the bounds the shift is the noise clipped to +-clip, and the clip binds.
        inside = np.abs(t) < 1.0 - clip - 1e-3
        np.testing.assert_allclose(shift[inside], np.clip(raw, -clip, clip)[inside], atol=1e-6)
        if policy_noise * 2 > clip:
            assert np.sum(np.abs(np.abs(shift[inside]) - clip) < 1e-6) > 0.1 * inside.sum()


# One agent for the learner and actor tests: its settings that shape the program are
# these; the hyperparameters the learner reads from its state are set per test.
SHARED = TD3Config(hidden_sizes=(16, 16), learning_rate=3e-3, policy_delay=3, exploration_noise=0.3)


@pytest.fixture(scope="module")
def shared():
    """(agent, learn, act, greedy, the initial state of key 0), compiled once: the twin
    critics' orthogonal init alone takes seconds to compile."""
    agent = build(SHARED)
    return (
        agent,
        jax.jit(agent.learn),
        jax.jit(agent.act),
        jax.jit(agent.greedy),
        jax.jit(agent.init)(jax.random.key(0)),
    )


def with_hparams(state, **values):
    return state.replace(
        hparams={**state.hparams, **{k: jnp.float32(v) for k, v in values.items()}}
    )


@pytest.mark.parametrize("policy_noise,noise_clip", [(0.2, 0.5), (2.0, 0.1)])
@pytest.mark.slow
def test_critic_step_matches_the_numpy_twin_min_target(shared, policy_noise, noise_clip):
    """Priorities (mean |TD| over the twin critics), the weighted critic loss and the mean
    target against numpy: the target actor with clipped smoothing noise, the minimum of
    the target critics, n-step rewards and discounts, importance weights."""
    _, learn, _, _, initial = shared
    config = TD3Config(
        hidden_sizes=(16, 16), reward_scale=0.5, policy_noise=policy_noise, noise_clip=noise_clip
    )
    state = with_hparams(
        spread_out(initial), reward_scale=0.5, policy_noise=policy_noise, noise_clip=noise_clip
    )
    sample = make_sample()
    key = jax.random.key(7)
    _, metrics, priorities = learn(state, sample, key)
    td, target = td_reference(state, sample, key, config)
    np.testing.assert_allclose(np.asarray(priorities), np.abs(td).mean(0), rtol=1e-4, atol=1e-5)
    weights = np.linspace(0.2, 1.0, 32)
    np.testing.assert_allclose(
        float(metrics["critic_loss"]), 0.5 * np.sum(np.mean(weights * td**2, -1)), rtol=1e-4
    )
    np.testing.assert_allclose(float(metrics["target"]), target.mean(), rtol=1e-4, atol=1e-5)
    # The min over the twins matters here (a mean or one critic would be far off) ...
    depth = len(config.hidden_sizes)
    both = critics_np(state.target_critic, sample.items.next_obs, np.zeros((32, 1)), depth)
    assert np.abs(both[0] - both[1]).mean() > 1e-2
    # ... and so does the clip, where the noise exceeds it.
    if policy_noise > noise_clip:
        unclipped, _ = td_reference(state, sample, key, config, noise_clip=np.inf)
        assert np.abs(np.abs(unclipped).mean(0) - np.asarray(priorities)).max() > 1e-3


# --- delayed updates ------------------------------------------------------------------------


@pytest.mark.slow
def test_actor_and_targets_move_exactly_every_policy_delay_critic_updates(shared):
    """policy_delay 3 over 10 updates: the critics move every update; the actor, its Adam
    state (step count and moments) and both targets only at updates 3, 6, 9. At those the
    actor loss is -mean Q_1(x, mu(x)) with the critics just updated, before the actor's step."""
    _, learn, _, _, initial = shared
    state = with_hparams(initial, tau=0.1)
    flat = lambda tree: np.asarray(ravel_pytree(tree)[0])  # noqa: E731
    actor_updates = 0
    for i in range(1, 11):
        sample = make_sample(seed=i)
        new, metrics, _ = learn(state, sample, jax.random.key(i))
        delayed = i % 3 == 0
        actor_updates += delayed
        assert int(new.steps) == i
        assert not np.array_equal(flat(new.critic), flat(state.critic)), i
        for part in ("params", "target_params", "target_critic", "actor_opt_state"):
            moved = not np.array_equal(flat(getattr(new, part)), flat(getattr(state, part)))
            assert moved == delayed, (i, part)
        adam, count = new.actor_opt_state
        assert int(adam.count) == int(count) == actor_updates, i
        assert int(new.critic_opt_state[1]) == i
        if delayed:
            obs = np.asarray(sample.items.obs, np.float64)
            q1 = critics_np(new.critic, obs, actor_np(state.params, obs, 2), 2)[0]
            np.testing.assert_allclose(
                float(metrics["actor_loss"]), -q1.mean(), rtol=1e-4, atol=1e-5
            )
            # The targets take one Polyak step towards the new actor and critics.
            for target, online, old in (
                (new.target_params, new.params, state.target_params),
                (new.target_critic, new.critic, state.target_critic),
            ):
                np.testing.assert_allclose(
                    flat(target), 0.1 * flat(online) + 0.9 * flat(old), rtol=1e-5, atol=1e-7
                )
        else:  # in between, the last actor update's loss is reported
            assert float(metrics["actor_loss"]) == float(state.actor_metrics["actor_loss"])
        state = new
    assert actor_updates == 3


# --- acting --------------------------------------------------------------------------------


@pytest.mark.slow
def test_acting_adds_clipped_gaussian_noise_and_greedy_is_noiseless(shared):
    spec = pendulum_spec()
    _, _, act, greedy, initial = shared
    params = initial.params
    obs = jnp.tile(jax.random.normal(jax.random.key(1), (1, 3)), (4096, 1))
    keys = jax.random.split(jax.random.key(2), 4096)
    _, action, extras = act(params, None, obs, None, keys, None)
    best = greedy(params, None, obs, None).action
    assert action.shape == best.shape == (4096, 1) and action.dtype == spec.action_dtype
    assert extras == {}
    mean = actor_np(params, obs[:1], 2)
    np.testing.assert_allclose(np.asarray(best), np.tile(2.0 * mean, (4096, 1)), atol=1e-6)
    noise = (np.asarray(action, np.float64) - np.asarray(best, np.float64)) / 2.0  # unit space
    assert abs(noise.mean()) < 0.02 and abs(noise.std() - 0.3) < 0.015, (noise.mean(), noise.std())
    # A saturated policy plus noise is clipped to the bounds, and reaches both.
    big = jax.tree.map(lambda x: 50.0 * x, params)
    wide = 100.0 * jax.random.normal(jax.random.key(3), (4096, 3))
    a = np.asarray(act(big, None, wide, None, keys, None).action)
    assert a.min() == spec.action_low[0] and a.max() == spec.action_high[0]
    # One key per env: an env's action does not depend on the rest of the batch.
    np.testing.assert_array_equal(
        np.asarray(act(params, None, obs[:7], None, keys[:7], None).action), np.asarray(action[:7])
    )


# --- configuration -------------------------------------------------------------------------


def test_discrete_envs_and_bad_values_are_config_errors():
    env, params = make("CartPole-v1")
    with pytest.raises(ConfigError, match="td3 needs continuous actions"):
        make_td3(TINY, BuildContext(spec_of(env, params), 4, 1, 10))
    for bad in (
        {"policy_delay": 0},
        {"policy_noise": -0.1},
        {"noise_clip": -1.0},
        {"exploration_noise": -0.5},
        {"tau": 0.0},
        {"tau": 1.5},
        {"learning_rate": -1.0},
        {"n_step": 0},
        {"gamma": 1.1},
        {"updates_per_tick": 0},
        {"reward_scale": 0.0},
        {"max_grad_norm": -1.0},
        {"memory": "gru"},
    ):
        with pytest.raises(ConfigError, match=f"agent.{next(iter(bad))}") as info:
            TD3Config(**bad)
        assert "\n" not in str(info.value)


def test_cli_bad_value_exits_2_with_one_line(tmp_path):
    code, stderr = run_cli_in_process("train", "td3_pendulum", "agent.policy_delay=0", cwd=tmp_path)
    assert code == 2, stderr[-2000:]
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxrl-async: error: "), stderr
    assert "agent.policy_delay" in lines[0] and "Traceback" not in stderr
    assert list(tmp_path.iterdir()) == []


# --- whole runs ------------------------------------------------------------------------------


# The shipped config at 6,000 steps, where about nine seeds in ten reach -250 (and none is
# near it at the first log point). Five seeds, three to pass and the median: at that pass
# rate 99% of draws of five pass.
@pytest.mark.slow
def test_td3_solves_pendulum():
    result = jaxrl_async.train(
        jaxrl_async.load_config(
            "td3_pendulum", ["train.total_steps=6000", "train.num_seeds=5", "train.progress=false"]
        )
    )
    assert_learns(result, -250.0, 3)
    assert np.all(curves(result)[:, 0] < -900.0), "the first log point should be far from solved"
    for key in ("critic_loss", "actor_loss", "q", "critic_grad_norm", "actor_grad_norm"):
        assert np.all(np.isfinite(result.metrics[key])), key
