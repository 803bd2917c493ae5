"""`returns.gae` and `returns.q_lambda` against plain-Python loops, time-major [T, B]."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.agents.common import fold_truncation
from jaxrl_async.agents.returns import gae, q_lambda
from tests.helpers.references import q_lambda_reference


def gae_reference(values, bootstrap_value, rewards, discounts, lambda_):
    """Plain-Python GAE: loop over the batch, then backwards over time."""
    T, B = len(values), len(values[0])
    advantages = [[0.0] * B for _ in range(T)]
    for b in range(B):
        next_advantage = 0.0
        for t in reversed(range(T)):
            next_value = bootstrap_value[b] if t == T - 1 else values[t + 1][b]
            delta = rewards[t][b] + discounts[t][b] * next_value - values[t][b]
            next_advantage = delta + discounts[t][b] * lambda_ * next_advantage
            advantages[t][b] = next_advantage
    return np.array(advantages)


def random_inputs(seed, T=17, B=5, gamma=0.97, end_prob=0.15):
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(T, B)).astype(np.float32)
    bootstrap = rng.normal(size=(B,)).astype(np.float32)
    rewards = rng.normal(size=(T, B)).astype(np.float32)
    ends = rng.random((T, B)) < end_prob
    ends[rng.integers(T), rng.integers(B)] = True  # at least one episode end
    discounts = np.where(ends, 0.0, gamma).astype(np.float32)
    return values, bootstrap, rewards, discounts


@pytest.mark.parametrize("lambda_", [0.0, 0.95, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_matches_python_loop_with_episode_ends(seed, lambda_):
    values, bootstrap, rewards, discounts = random_inputs(seed)
    expected = gae_reference(
        values.tolist(), bootstrap.tolist(), rewards.tolist(), discounts.tolist(), lambda_
    )
    got = gae(
        jnp.asarray(values),
        jnp.asarray(bootstrap),
        jnp.asarray(rewards),
        jnp.asarray(discounts),
        lambda_,
    )
    assert got.shape == values.shape
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-5)


def test_gae_lambda_zero_is_one_step_td_error():
    values, bootstrap, rewards, discounts = random_inputs(3)
    next_values = np.concatenate([values[1:], bootstrap[None]])
    td = rewards + discounts * next_values - values
    got = gae(
        jnp.asarray(values),
        jnp.asarray(bootstrap),
        jnp.asarray(rewards),
        jnp.asarray(discounts),
        0.0,
    )
    np.testing.assert_allclose(np.asarray(got), td, rtol=1e-5, atol=1e-6)


def test_gae_lambda_one_without_ends_is_discounted_return_minus_value():
    T, B, gamma = 12, 3, 0.9
    values, bootstrap, rewards, _ = random_inputs(4, T=T, B=B)
    discounts = np.full((T, B), gamma, np.float32)
    # Monte-Carlo return bootstrapped at the end: G_t = sum_k gamma^k r_{t+k} + gamma^(T-t) V(x_T).
    returns = np.zeros((T, B))
    for t in range(T):
        returns[t] = (
            sum(gamma**k * rewards[t + k] for k in range(T - t)) + gamma ** (T - t) * bootstrap
        )
    got = gae(
        jnp.asarray(values),
        jnp.asarray(bootstrap),
        jnp.asarray(rewards),
        jnp.asarray(discounts),
        1.0,
    )
    np.testing.assert_allclose(np.asarray(got), returns - values, rtol=1e-5, atol=1e-5)


def test_gae_cuts_the_trace_at_an_episode_end():
    # One env, an end at t=1: advantages before it must not see rewards after it.
    values = jnp.zeros((4, 1))
    rewards = jnp.array([[0.0], [1.0], [100.0], [100.0]])
    discounts = jnp.array([[1.0], [0.0], [1.0], [1.0]])
    got = gae(values, jnp.zeros((1,)), rewards, discounts, 1.0)
    np.testing.assert_allclose(np.asarray(got)[:, 0], [1.0, 1.0, 200.0, 100.0])


def test_gae_jitted_equals_eager():
    values, bootstrap, rewards, discounts = random_inputs(5)
    args = tuple(map(jnp.asarray, (values, bootstrap, rewards, discounts)))
    eager = gae(*args, 0.95)
    jitted = jax.jit(gae, static_argnums=4)(*args, 0.95)
    # lambda_ traced as an array must work too (it can live in state).
    traced_lambda = jax.jit(gae)(*args, jnp.float32(0.95))
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(traced_lambda), np.asarray(eager), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "shapes",
    [
        {"values": (5, 3), "bootstrap": (3,), "rewards": (4, 3), "discounts": (5, 3)},
        {"values": (5, 3), "bootstrap": (3,), "rewards": (5, 3), "discounts": (5, 2)},
        {"values": (5, 3), "bootstrap": (2,), "rewards": (5, 3), "discounts": (5, 3)},
        {"values": (5, 3), "bootstrap": (5, 3), "rewards": (5, 3), "discounts": (5, 3)},
    ],
    ids=["rewards-T", "discounts-B", "bootstrap-B", "bootstrap-rank"],
)
def test_gae_rejects_mismatched_shapes(shapes):
    arrays = {name: jnp.zeros(shape) for name, shape in shapes.items()}
    with pytest.raises(ValueError, match="gae"):
        gae(arrays["values"], arrays["bootstrap"], arrays["rewards"], arrays["discounts"], 0.9)


# ---------------------------------------------------------------------------------------------
# Q(lambda)


def random_episodes(seed, T=19, B=4, A=3, end_prob=0.12):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(T, B)).astype(np.float32)
    terminated = rng.random((T, B)) < end_prob
    truncated = rng.random((T, B)) < end_prob  # sometimes both at once: termination wins
    terminated[rng.integers(T), 0] = True  # at least one of each kind
    truncated[rng.integers(T), 1] = True
    next_q = rng.normal(size=(T, B, A)).astype(np.float32)
    return rewards, terminated, truncated, next_q


def q_lambda_of(rewards, terminated, truncated, next_q, gamma, lambda_):
    """What PQN computes: max_a Q, truncations folded into the rewards, then q_lambda."""
    next_values = jnp.max(jnp.asarray(next_q), axis=-1)
    folded, discounts = fold_truncation(
        jnp.asarray(rewards), next_values, jnp.asarray(terminated), jnp.asarray(truncated), gamma
    )
    return np.asarray(q_lambda(next_values, folded, discounts, lambda_))


@pytest.mark.parametrize("lambda_", [0.0, 0.65, 0.95, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_q_lambda_matches_the_forward_view_with_terminations_and_truncations(seed, lambda_):
    episodes = random_episodes(seed)
    gamma = 0.9
    expected = q_lambda_reference(*(x.tolist() for x in episodes), gamma, lambda_)
    got = q_lambda_of(*episodes, gamma, lambda_)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_q_lambda_zero_is_the_one_step_q_learning_target():
    rewards, terminated, truncated, next_q = random_episodes(3)
    gamma = 0.97
    # r + gamma max_a Q(x'), with x' the final observation at a truncation, and no
    # bootstrap at a termination.
    expected = rewards + gamma * (1 - terminated) * next_q.max(-1)
    got = q_lambda_of(rewards, terminated, truncated, next_q, gamma, 0.0)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_q_lambda_one_is_the_discounted_return_to_the_episode_or_rollout_end():
    rewards, terminated, truncated, next_q = random_episodes(4, T=12, B=3)
    gamma = 0.9
    T, B = rewards.shape
    expected = np.zeros((T, B))
    for b in range(B):
        for t in range(T):
            ret, k = 0.0, t
            while True:
                ret += gamma ** (k - t) * rewards[k, b]
                if terminated[k, b]:
                    break
                if truncated[k, b] or k == T - 1:  # bootstrap from the final observation
                    ret += gamma ** (k - t + 1) * next_q[k, b].max()
                    break
                k += 1
            expected[t, b] = ret
    got = q_lambda_of(rewards, terminated, truncated, next_q, gamma, 1.0)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_q_lambda_bootstraps_a_truncation_from_its_final_observation():
    """One env, truncated at t=1: G_1 bootstraps from max Q of the final observation
    (next_q[1]), not from the reset observation's (next_q[2] belongs to the new episode);
    G_0 sees no reward after the episode's end."""
    rewards = np.array([[1.0], [2.0], [100.0]], np.float32)
    terminated = np.zeros((3, 1), bool)
    truncated = np.array([[False], [True], [False]])
    next_q = np.array([[[0.0, 5.0]], [[10.0, 3.0]], [[-7.0, 50.0]]], np.float32)
    got = q_lambda_of(rewards, terminated, truncated, next_q, 0.5, 1.0)
    np.testing.assert_allclose(
        got[:, 0], [1.0 + 0.5 * (2.0 + 0.5 * 10.0), 2.0 + 0.5 * 10.0, 100.0 + 0.5 * 50.0]
    )


def test_q_lambda_jitted_with_a_traced_lambda_equals_eager():
    rewards, terminated, truncated, next_q = random_episodes(5)
    next_values = jnp.max(jnp.asarray(next_q), -1)
    folded, discounts = fold_truncation(
        jnp.asarray(rewards), next_values, jnp.asarray(terminated), jnp.asarray(truncated), 0.99
    )
    eager = q_lambda(next_values, folded, discounts, 0.65)
    traced = jax.jit(q_lambda)(next_values, folded, discounts, jnp.float32(0.65))
    np.testing.assert_allclose(np.asarray(traced), np.asarray(eager), rtol=1e-6, atol=1e-6)


def test_q_lambda_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="q_lambda"):
        q_lambda(jnp.zeros((5, 3)), jnp.zeros((5, 3)), jnp.zeros((4, 3)), 0.9)
