"""SAC: the squashed Gaussian, acting in bounds, the learner step against a numpy
reference, importance weights, the temperature, and learning Pendulum over
several seeds, at its own settings and at another library's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.agents.sac import SACConfig, make_sac
from jaxrl_async.envs import make, spec_of
from jaxrl_async.errors import ConfigError
from jaxrl_async.nn import distributions as D
from jaxrl_async.types import BuildContext, NStepTransition, Sample
from tests.helpers.learning import assert_learns, curves
from tests.helpers.references import critics_np, dense_layers, mlp_np, pendulum_spec

TINY = SACConfig(hidden_sizes=(16, 16), learning_rate=3e-3)


def build(config=TINY, spec=None, axis_name=None):
    spec = pendulum_spec() if spec is None else spec
    return make_sac(
        config, BuildContext(spec, num_envs=4, rollout_len=1, num_updates=10, axis_name=axis_name)
    )


def make_sample(b=32, seed=0, discount=0.9):
    """A hand-made Pendulum-shaped batch: actions in [-2, 2], some terminal discounts."""
    k = jax.random.split(jax.random.key(seed), 4)
    obs = jax.random.normal(k[0], (b, 3))
    items = NStepTransition(
        obs=obs,
        action=jax.random.uniform(k[1], (b, 1), minval=-2.0, maxval=2.0),
        reward=jax.random.normal(k[2], (b,)),
        discount=jnp.where(jnp.arange(b) % 4 == 0, 0.0, discount).astype(jnp.float32),
        next_obs=obs + 0.1 * jax.random.normal(k[3], (b, 3)),
    )
    return Sample(
        items, jnp.arange(b, dtype=jnp.int32), jnp.full((b,), 1.0 / b), jnp.ones((b,), jnp.float32)
    )


# --- numpy reference of the networks and the TD error ------------------------------------


def actor_np(params, obs, depth):
    out = mlp_np(dense_layers(params["params"], depth), np.asarray(obs, np.float64))
    mean, log_std = np.split(out, 2, axis=-1)
    return mean, np.clip(log_std, -5.0, 2.0)


def td_reference(state, sample, key, config, half=2.0):
    """TD errors [2, b] of the step `learn(state, sample, key)` takes, in float64 numpy.

    The only thing shared with the implementation is its documented noise: the next
    action of sample i is drawn with fold_in(second half of split(key), i).
    """
    depth = len(config.hidden_sizes)
    items = sample.items
    b, action_dim = items.action.shape
    next_key = jax.random.split(key)[1]
    noise = np.stack(
        [
            np.asarray(jax.random.normal(jax.random.fold_in(next_key, i), (action_dim,)))
            for i in range(b)
        ]
    )
    mean, log_std = actor_np(state.params, items.next_obs, depth)
    u = mean + np.exp(log_std) * noise
    a_next = np.tanh(u)
    log_pi = np.sum(
        -0.5 * noise**2 - log_std - 0.5 * np.log(2 * np.pi) - np.log(1.0 - np.tanh(u) ** 2), axis=-1
    )
    alpha = float(np.exp(state.log_alpha))
    next_q = critics_np(state.target_critic, items.next_obs, a_next, depth).min(0)
    target = config.reward_scale * np.asarray(items.reward, np.float64) + np.asarray(
        items.discount, np.float64
    ) * (next_q - alpha * log_pi)
    q = critics_np(state.critic, items.obs, np.asarray(items.action, np.float64) / half, depth)
    return q - target


# --- the distribution ------------------------------------------------------------------------


def test_tanh_log_det_jacobian_is_stable_and_exact():
    u = np.array([-30.0, -8.0, -1.0, 0.0, 0.3, 5.0, 30.0])
    got = np.asarray(D.tanh_log_det_jacobian(jnp.asarray(u, jnp.float32)[:, None]))
    expected = np.log(4.0) - 2.0 * np.logaddexp(u, -u)  # log(1 - tanh^2) = log(4 / (e^u + e^-u)^2)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert np.all(np.isfinite(got))


def test_squashed_gaussian_log_prob_matches_change_of_variables():
    """log p(tanh u) = log N(u; m, s) - log(1 - tanh(u)^2), summed over action dimensions."""
    rng = np.random.default_rng(0)
    mean, log_std = rng.normal(size=(64, 3)), rng.uniform(-2.0, 1.0, size=(64, 3))
    u = mean + np.exp(log_std) * rng.normal(size=(64, 3))
    y = np.tanh(u)
    std = np.exp(log_std)
    density = (
        np.exp(-0.5 * ((np.arctanh(y) - mean) / std) ** 2)
        / (std * np.sqrt(2 * np.pi))
        / (1.0 - y**2)
    )
    expected = np.log(density).sum(-1)
    got = D.squashed_gaussian_log_prob(
        jnp.asarray(mean, jnp.float32),
        jnp.asarray(log_std, jnp.float32),
        jnp.asarray(u, jnp.float32),
    )
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-4, atol=1e-4)


def test_squashed_gaussian_samples_follow_their_density():
    """A histogram of 200k draws against the density integrated over each bin (chi-square)."""
    n, mean, log_std = 200_000, 0.4, np.log(0.8)
    keys = jax.random.split(jax.random.key(1), n)
    y, log_p = D.squashed_gaussian_sample(
        keys, jnp.full((n, 1), mean, jnp.float32), jnp.full((n, 1), log_std, jnp.float32)
    )
    y, log_p = np.asarray(y[:, 0], np.float64), np.asarray(log_p, np.float64)
    assert y.min() > -1.0 and y.max() < 1.0
    edges = np.linspace(-1.0, 1.0, 41)
    fine = np.linspace(-1.0, 1.0, 40 * 200 + 1)[1:-1]  # midpoint rule, open interval
    std = np.exp(log_std)
    pdf = (
        np.exp(-0.5 * ((np.arctanh(fine) - mean) / std) ** 2)
        / (std * np.sqrt(2 * np.pi))
        / (1.0 - fine**2)
    )
    probs = np.add.reduceat(pdf * (2.0 / (40 * 200)), np.arange(0, fine.size, 200))
    probs = probs / probs.sum()
    counts = np.histogram(y, edges)[0]
    chi2 = np.sum((counts - n * probs) ** 2 / (n * probs))
    assert chi2 < 80, chi2  # 39 degrees of freedom: p < 1e-4 beyond 80
    # ...and the returned log-probabilities are the log density at each draw.
    pdf_at = (
        np.exp(-0.5 * ((np.arctanh(y) - mean) / std) ** 2)
        / (std * np.sqrt(2 * np.pi))
        / (1.0 - y**2)
    )
    ok = np.abs(y) < 0.999  # arctanh in float64 of a float32-rounded y loses accuracy near 1
    np.testing.assert_allclose(log_p[ok], np.log(pdf_at[ok]), rtol=2e-3, atol=2e-3)


# --- acting ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_actions_are_within_pendulum_bounds_and_typed():
    spec = pendulum_spec()
    agent = build(spec=spec)
    state = agent.init(jax.random.key(0))
    # Push the policy to extremes: a huge mean saturates tanh at the bounds.
    big = jax.tree.map(lambda x: 50.0 * x, state.params)
    for params in (state.params, big):
        obs = 100.0 * jax.random.normal(jax.random.key(1), (512, 3))
        keys = jax.random.split(jax.random.key(2), 512)
        carry, action, extras = agent.act(params, None, obs, None, keys, None)
        assert carry is None
        assert action.shape == (512, 1) and action.dtype == spec.action_dtype
        assert np.all(np.asarray(action) >= spec.action_low)
        assert np.all(np.asarray(action) <= spec.action_high)
        assert extras == {}
    action = np.asarray(agent.act(state.params, None, obs, None, keys, None).action)
    assert action.std() > 0.5, "a fresh policy (std 1 before tanh) should explore widely"
    # One key per env: an env's action does not depend on the rest of the batch.
    half = agent.act(state.params, None, obs[:7], None, keys[:7], None).action
    np.testing.assert_allclose(np.asarray(half), action[:7], rtol=0, atol=1e-6)


def test_discrete_envs_and_bad_values_are_config_errors():
    env, params = make("CartPole-v1")
    with pytest.raises(ConfigError, match="continuous"):
        build(spec=spec_of(env, params))
    for bad in (
        {"tau": 0.0},
        {"init_alpha": -1.0},
        {"learning_rate": -1.0},
        {"target_entropy": float("nan")},
        {"max_grad_norm": -1.0},
        {"n_step": 0},
    ):
        with pytest.raises(ConfigError, match=f"agent.{next(iter(bad))}"):
            SACConfig(**bad)


# --- learning ------------------------------------------------------------------------------


@pytest.mark.slow
def test_priorities_are_the_abs_td_errors_of_the_step():
    config = SACConfig(hidden_sizes=(16, 16), reward_scale=0.5)
    agent = build(config)
    state = agent.init(jax.random.key(0))
    # A target network apart from the critic and a temperature apart from 1, so that a
    # mix-up of either shows.
    state = state.replace(
        target_critic=jax.tree.map(lambda x: 1.1 * x + 0.01, state.critic),
        log_alpha=jnp.float32(np.log(0.3)),
    )
    sample, key = make_sample(), jax.random.key(7)
    _, metrics, priorities = agent.learn(state, sample, key)
    td = td_reference(state, sample, key, config)
    np.testing.assert_allclose(np.asarray(priorities), np.abs(td).mean(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        float(metrics["critic_loss"]), 0.5 * np.sum(np.mean(td**2, -1)), rtol=1e-4
    )
    assert priorities.shape == (32,)


@pytest.mark.slow
def test_learn_fits_the_critic_to_its_targets_on_a_fixed_batch():
    agent = build()
    state = agent.init(jax.random.key(0))
    sample = make_sample(b=64)
    learn = jax.jit(agent.learn)
    losses = []
    for i in range(300):
        state, metrics, _ = learn(state, sample, jax.random.key(i))
        losses.append(float(metrics["critic_loss"]))
    assert np.mean(losses[-10:]) < 0.25 * np.mean(losses[:10]), losses[::30]
    assert np.all(np.isfinite(losses))


@pytest.mark.slow
def test_zero_importance_weight_removes_a_samples_critic_gradient():
    """Sample 3's reward only enters the critic loss; at weight 0 it changes no parameter."""
    agent = build()
    state = agent.init(jax.random.key(0))
    sample = make_sample()
    changed = sample._replace(
        items=sample.items._replace(reward=sample.items.reward.at[3].add(50.0))
    )

    def params_after(s):
        new, _, _ = agent.learn(state, s, jax.random.key(3))
        return np.asarray(jax.flatten_util.ravel_pytree((new.params, new.critic, new.log_alpha))[0])

    zero = sample.weights.at[3].set(0.0)
    np.testing.assert_array_equal(
        params_after(sample._replace(weights=zero)), params_after(changed._replace(weights=zero))
    )
    assert not np.allclose(params_after(sample), params_after(changed))


@pytest.mark.parametrize("target_entropy,direction", [(5.0, 1), (-5.0, -1)])
@pytest.mark.slow
def test_temperature_rises_below_target_entropy_and_falls_above(target_entropy, direction):
    agent = build(SACConfig(hidden_sizes=(16, 16), target_entropy=target_entropy))
    state = agent.init(jax.random.key(0))
    new, metrics, _ = agent.learn(state, make_sample(), jax.random.key(1))
    entropy = float(metrics["entropy"])
    assert (entropy < target_entropy) == (direction > 0), entropy
    assert np.sign(float(new.log_alpha - state.log_alpha)) == direction


@pytest.mark.slow
def test_target_critics_track_the_critics_by_polyak_averaging():
    config = SACConfig(hidden_sizes=(16, 16), tau=0.25)
    agent = build(config)
    state = agent.init(jax.random.key(0))
    new, _, _ = agent.learn(state, make_sample(), jax.random.key(1))
    jax.tree.map(
        lambda t, c, old: np.testing.assert_allclose(
            np.asarray(t), 0.25 * np.asarray(c) + 0.75 * np.asarray(old), rtol=1e-6, atol=1e-7
        ),
        new.target_critic,
        new.critic,
        state.target_critic,
    )


# The shipped config cut to 1e4 steps, where nearly every seed reaches -250 under either
# PRNG (a shorter cut leaves too many short). Six seeds, four to pass and the median.
@pytest.mark.slow
def test_sac_solves_pendulum(prng="auto"):
    import jaxrl_async

    result = jaxrl_async.train(
        jaxrl_async.load_config(
            "sac_pendulum",
            [
                "train.total_steps=10000",
                "train.num_seeds=6",
                f"train.prng={prng}",
                "train.progress=false",
            ],
        )
    )
    assert_learns(result, -250.0, 4)
    assert np.all(curves(result)[:, 0] < -900.0), "the first log point should be far from solved"
    for key in ("loss", "critic_loss", "actor_loss", "alpha", "entropy", "grad_norm"):
        assert np.all(np.isfinite(result.metrics[key])), key
    assert result.metrics["alpha"][-1] < 0.5, "the temperature should have come down from 1"
