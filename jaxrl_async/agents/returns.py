"""Return estimators shared by agents: small pure functions, time-major [T, B]."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


def gae(values, bootstrap_value, rewards, discounts, lambda_):
    """Generalised advantage estimates (Schulman et al. 2016).

    values [T, B] = V(x_t); bootstrap_value [B] = V(x_T); rewards [T, B] = r_t;
    discounts [T, B] = γ · (1 − terminated_t), 0 where the episode ends.
    Returns advantages [T, B]:
      δ_t = r_t + discount_t · V(x_{t+1}) − V(x_t),
      A_t = δ_t + discount_t · λ · A_{t+1}.
    """
    if values.shape != rewards.shape or values.shape != discounts.shape:
        raise ValueError(
            f"gae: values {values.shape}, rewards {rewards.shape} and discounts "
            f"{discounts.shape} must share the shape [T, B]"
        )
    if bootstrap_value.shape != values.shape[1:]:
        raise ValueError(f"gae: bootstrap_value {bootstrap_value.shape} must be {values.shape[1:]}")
    next_values = jnp.concatenate([values[1:], bootstrap_value[None]], axis=0)
    deltas = rewards + discounts * next_values - values

    def backward(advantage, xs):
        delta_t, discount_t = xs
        advantage = delta_t + discount_t * lambda_ * advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(
        backward, jnp.zeros_like(bootstrap_value), (deltas, discounts), reverse=True
    )
    return advantages


def q_lambda(next_values, rewards, discounts, lambda_):
    """Peng's Q(λ) returns (Peng & Williams 1996) as PQN trains on them (Gallici et al.
    2024, "Simplifying Deep Temporal Difference Learning"), all [T, B].

    next_values[t] = max_a Q(x'_t, a), x'_t the observation after step t before any
    auto-reset; rewards [T, B] = r_t; discounts [T, B] = γ · (1 − done_t), 0 where the
    episode ends. Backwards from the rollout's end, which bootstraps with max_a Q:
      G_t = r_t + discount_t · [(1 − λ) · next_values_t + λ · G_{t+1}],
      G_T = next_values_{T−1}  (so G_{T−1} = r_{T−1} + discount_{T−1} · next_values_{T−1}).
    λ = 0 is the one-step Q-learning target, λ = 1 the discounted return to the episode's
    end or the rollout's bootstrap. The trace is cut only where discount_t = 0, never at
    exploratory actions (Watkins's Q(λ) would cut there). A truncation bootstraps from its
    final observation where the caller folds γ · next_values_t into its reward and sets
    its discount to 0 (`agents.common.fold_truncation`).
    """
    if next_values.shape != rewards.shape or next_values.shape != discounts.shape:
        raise ValueError(
            f"q_lambda: next_values {next_values.shape}, rewards {rewards.shape} "
            f"and discounts {discounts.shape} must share the shape [T, B]"
        )

    def backward(next_return, xs):
        reward, discount, next_value = xs
        ret = reward + discount * ((1 - lambda_) * next_value + lambda_ * next_return)
        return ret, ret

    _, returns = jax.lax.scan(
        backward, next_values[-1], (rewards, discounts, next_values), reverse=True
    )
    return returns


class VTraceReturns(NamedTuple):
    vs: jax.Array  # [T, B] V-trace value targets
    pg_advantages: jax.Array  # [T, B] importance-weighted policy-gradient advantages


def vtrace(
    values,
    bootstrap_value,
    rewards,
    discounts,
    log_rhos,
    *,
    lambda_=1.0,
    clip_rho_threshold=1.0,
    clip_pg_rho_threshold=1.0,
) -> VTraceReturns:
    """V-trace off-policy targets (Espeholt et al. 2018, "IMPALA", arXiv:1802.01561, eq. 1).

    values [T, B] = V(x_t); bootstrap_value [B] = V(x_T); rewards [T, B] = r_t;
    discounts [T, B] = γ · (1 − done_t), 0 where the episode ends;
    log_rhos [T, B] = log π(a_t|x_t) − log μ(a_t|x_t), target over behaviour policy.
    With ρ_t = min(ρ̄, π/μ), c_t = λ · min(1, π/μ):
      δ_t = ρ_t · (r_t + discount_t · V(x_{t+1}) − V(x_t)),
      v_t − V(x_t) = δ_t + discount_t · c_t · (v_{t+1} − V(x_{t+1})),   v_T = V(x_T),
      A_t = min(ρ̄_pg, π/μ) · (r_t + discount_t · v_{t+1} − V(x_t)).
    A threshold of None leaves that weight unclipped. Both outputs are constants to
    autodiff (targets, not functions of the parameters).
    """
    shape = values.shape
    for name, x in (("rewards", rewards), ("discounts", discounts), ("log_rhos", log_rhos)):
        if x.shape != shape:
            raise ValueError(
                f"vtrace: {name} {x.shape} must have the shape of values {shape} [T, B]"
            )
    if bootstrap_value.shape != shape[1:]:
        raise ValueError(f"vtrace: bootstrap_value {bootstrap_value.shape} must be {shape[1:]}")
    rhos = jnp.exp(log_rhos)
    clip = lambda x, threshold: x if threshold is None else jnp.minimum(threshold, x)  # noqa: E731
    cs = lambda_ * jnp.minimum(1.0, rhos)
    next_values = jnp.concatenate([values[1:], bootstrap_value[None]], axis=0)
    deltas = clip(rhos, clip_rho_threshold) * (rewards + discounts * next_values - values)

    def backward(correction, xs):
        delta_t, discount_t, c_t = xs
        correction = delta_t + discount_t * c_t * correction
        return correction, correction

    _, corrections = jax.lax.scan(
        backward, jnp.zeros_like(bootstrap_value), (deltas, discounts, cs), reverse=True
    )
    vs = values + corrections
    next_vs = jnp.concatenate([vs[1:], bootstrap_value[None]], axis=0)
    pg_advantages = clip(rhos, clip_pg_rho_threshold) * (rewards + discounts * next_vs - values)
    return VTraceReturns(jax.lax.stop_gradient(vs), jax.lax.stop_gradient(pg_advantages))


def nstep_returns(rewards, terminated, truncated, n: int, gamma: float):
    """n-step returns from each of the first T steps of a window [T + n - 1, B].

    For start t the return sums γ^k · r_{t+k} up to n steps, stopping after the step
    where the episode ended (terminated or truncated). Returns (returns [T, B],
    discounts [T, B], offsets int32 [T, B]): the bootstrap target is
    returns + discounts · V(x'_{t+offset}), where x'_{t+k} is the observation after
    step t+k before any auto-reset. discounts is γ^(offset+1), and 0 where the episode
    terminated (a truncation still bootstraps, from its final observation).
    """
    if n < 1 or rewards.shape[0] < n:
        raise ValueError(
            f"nstep_returns: need n >= 1 and a window of at least n steps, got "
            f"n={n} and {rewards.shape[0]} steps"
        )
    T = rewards.shape[0] - (n - 1)
    returns = jnp.zeros(rewards.shape[1:], jnp.float32)[None].repeat(T, 0)
    discounts = jnp.zeros_like(returns)
    offsets = jnp.zeros(returns.shape, jnp.int32)
    alive = jnp.ones(returns.shape, bool)
    for k in range(n):
        reward, term, trunc = (x[k : k + T] for x in (rewards, terminated, truncated))
        returns = returns + jnp.where(alive, gamma**k * reward.astype(jnp.float32), 0.0)
        offsets = jnp.where(alive, k, offsets)
        ends = alive & (term | trunc)
        discounts = jnp.where(ends, jnp.where(term, 0.0, gamma ** (k + 1)), discounts)
        alive = alive & ~(term | trunc)
    discounts = jnp.where(alive, gamma**n, discounts)
    return returns, discounts, offsets
