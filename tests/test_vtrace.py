"""`returns.vtrace` against plain-Python references, time-major [T, B]."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.agents.returns import VTraceReturns, vtrace


def vtrace_reference(
    values, bootstrap_value, rewards, discounts, log_rhos, lambda_, clip_rho, clip_pg_rho
):
    """Plain Python, [T][B] lists, from the sum form of Espeholt et al. (2018), eq. 1:

    v_s = V(x_s) + sum_{t>=s} (prod_{i=s}^{t-1} discount_i c_i) delta_t,
    delta_t = rho_t (r_t + discount_t V(x_{t+1}) - V(x_t)),
    A_s = rho^pg_s (r_s + discount_s v_{s+1} - V(x_s)),  v_T = V(x_T).
    """
    T, B = len(values), len(values[0])
    clip = lambda x, c: x if c is None else min(c, x)  # noqa: E731
    vs = [[0.0] * B for _ in range(T)]
    pg = [[0.0] * B for _ in range(T)]
    for b in range(B):
        value = lambda t: bootstrap_value[b] if t == T else values[t][b]  # noqa: E731
        rho = [float(np.exp(log_rhos[t][b])) for t in range(T)]
        for s in range(T):
            total, trace = value(s), 1.0
            for t in range(s, T):
                delta = clip(rho[t], clip_rho) * (
                    rewards[t][b] + discounts[t][b] * value(t + 1) - value(t)
                )
                total += trace * delta
                trace *= discounts[t][b] * lambda_ * min(1.0, rho[t])
            vs[s][b] = total
        for s in range(T):
            next_vs = bootstrap_value[b] if s == T - 1 else vs[s + 1][b]
            pg[s][b] = clip(rho[s], clip_pg_rho) * (
                rewards[s][b] + discounts[s][b] * next_vs - value(s)
            )
    return np.array(vs), np.array(pg)


def random_inputs(seed, T=13, B=4, gamma=0.95, end_prob=0.15, rho_spread=1.0):
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(T, B)).astype(np.float32)
    bootstrap = rng.normal(size=(B,)).astype(np.float32)
    rewards = rng.normal(size=(T, B)).astype(np.float32)
    ends = rng.random((T, B)) < end_prob
    ends[rng.integers(T), rng.integers(B)] = True  # at least one episode end
    discounts = np.where(ends, 0.0, gamma).astype(np.float32)
    log_rhos = (rho_spread * rng.normal(size=(T, B))).astype(np.float32)
    return values, bootstrap, rewards, discounts, log_rhos


def _as_jax(*arrays):
    return tuple(map(jnp.asarray, arrays))


@pytest.mark.parametrize("clips", [(1.0, 1.0), (2.0, 0.5), (None, None)], ids=str)
@pytest.mark.parametrize("lambda_", [1.0, 0.7])
@pytest.mark.parametrize("seed", [0, 1])
def test_vtrace_matches_python_reference_with_ends_and_clipping(seed, lambda_, clips):
    clip_rho, clip_pg_rho = clips
    inputs = random_inputs(seed)
    rhos = np.exp(inputs[-1])
    # The inputs exercise what the test claims: clipping active on both sides and traces cut.
    assert (rhos > 2.0).any() and (rhos < 0.5).any() and (inputs[3] == 0).any()
    expected_vs, expected_pg = vtrace_reference(
        *(x.tolist() for x in inputs), lambda_, clip_rho, clip_pg_rho
    )
    got = vtrace(
        *_as_jax(*inputs),
        lambda_=lambda_,
        clip_rho_threshold=clip_rho,
        clip_pg_rho_threshold=clip_pg_rho,
    )
    assert isinstance(got, VTraceReturns)
    assert got.vs.shape == got.pg_advantages.shape == inputs[0].shape
    np.testing.assert_allclose(np.asarray(got.vs), expected_vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(got.pg_advantages), expected_pg, rtol=1e-5, atol=1e-5)


def test_on_policy_vtrace_is_the_bootstrapped_discounted_return():
    """log_rhos = 0, lambda = 1: v_t = sum_k (prod discounts) r_{t+k} + ... V(x_T), cut at ends."""
    values, bootstrap, rewards, discounts, _ = random_inputs(3)
    T, B = values.shape
    expected = np.zeros((T, B))
    for b in range(B):
        ret = bootstrap[b]
        for t in reversed(range(T)):
            ret = rewards[t, b] + discounts[t, b] * ret
            expected[t, b] = ret
    got = vtrace(*_as_jax(values, bootstrap, rewards, discounts, np.zeros_like(values)))
    np.testing.assert_allclose(np.asarray(got.vs), expected, rtol=1e-5, atol=1e-5)
    # ...and the advantage is the return minus the baseline.
    np.testing.assert_allclose(
        np.asarray(got.pg_advantages), expected - values, rtol=1e-5, atol=1e-5
    )


def test_vtrace_outputs_are_constants_to_autodiff():
    values, bootstrap, rewards, discounts, log_rhos = _as_jax(*random_inputs(4))

    def loss(values, log_rhos):
        out = vtrace(values, bootstrap, rewards, discounts, log_rhos)
        return jnp.sum(out.vs) + jnp.sum(out.pg_advantages)

    for grad in jax.grad(loss, argnums=(0, 1))(values, log_rhos):
        np.testing.assert_array_equal(np.asarray(grad), 0.0)


def test_vtrace_jitted_equals_eager():
    args = _as_jax(*random_inputs(5))
    kwargs = {"lambda_": 0.9, "clip_rho_threshold": 1.5, "clip_pg_rho_threshold": 1.0}
    eager = vtrace(*args, **kwargs)
    jitted = jax.jit(lambda *a: vtrace(*a, **kwargs))(*args)
    # Hyperparameters traced as arrays must work too (they can live in state).
    traced = jax.jit(lambda a, kw: vtrace(*a, **kw))(
        args, {k: jnp.float32(v) for k, v in kwargs.items()}
    )
    for other in (jitted, traced):
        for x, y in zip(other, eager):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "shapes",
    [
        {
            "values": (5, 3),
            "bootstrap": (3,),
            "rewards": (4, 3),
            "discounts": (5, 3),
            "log_rhos": (5, 3),
        },
        {
            "values": (5, 3),
            "bootstrap": (3,),
            "rewards": (5, 3),
            "discounts": (5, 2),
            "log_rhos": (5, 3),
        },
        {
            "values": (5, 3),
            "bootstrap": (3,),
            "rewards": (5, 3),
            "discounts": (5, 3),
            "log_rhos": (5,),
        },
        {
            "values": (5, 3),
            "bootstrap": (2,),
            "rewards": (5, 3),
            "discounts": (5, 3),
            "log_rhos": (5, 3),
        },
        {
            "values": (5, 3),
            "bootstrap": (5, 3),
            "rewards": (5, 3),
            "discounts": (5, 3),
            "log_rhos": (5, 3),
        },
    ],
    ids=["rewards-T", "discounts-B", "log_rhos-rank", "bootstrap-B", "bootstrap-rank"],
)
def test_vtrace_rejects_mismatched_shapes(shapes):
    arrays = {name: jnp.zeros(shape) for name, shape in shapes.items()}
    with pytest.raises(ValueError, match="vtrace"):
        vtrace(
            arrays["values"],
            arrays["bootstrap"],
            arrays["rewards"],
            arrays["discounts"],
            arrays["log_rhos"],
        )
