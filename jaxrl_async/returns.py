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
        raise ValueError(f"gae: values {values.shape}, rewards {rewards.shape} and discounts "
                         f"{discounts.shape} must share the shape [T, B]")
    if bootstrap_value.shape != values.shape[1:]:
        raise ValueError(f"gae: bootstrap_value {bootstrap_value.shape} must be {values.shape[1:]}")
    next_values = jnp.concatenate([values[1:], bootstrap_value[None]], axis=0)
    deltas = rewards + discounts * next_values - values

    def backward(advantage, xs):
        delta_t, discount_t = xs
        advantage = delta_t + discount_t * lambda_ * advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(bootstrap_value),
                                 (deltas, discounts), reverse=True)
    return advantages


class VTraceReturns(NamedTuple):
    vs: jax.Array  # [T, B] V-trace value targets
    pg_advantages: jax.Array  # [T, B] importance-weighted policy-gradient advantages


def vtrace(values, bootstrap_value, rewards, discounts, log_rhos, *, lambda_=1.0,
           clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0) -> VTraceReturns:
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
            raise ValueError(f"vtrace: {name} {x.shape} must have the shape of values {shape} "
                             "[T, B]")
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

    _, corrections = jax.lax.scan(backward, jnp.zeros_like(bootstrap_value),
                                  (deltas, discounts, cs), reverse=True)
    vs = values + corrections
    next_vs = jnp.concatenate([vs[1:], bootstrap_value[None]], axis=0)
    pg_advantages = clip(rhos, clip_pg_rho_threshold) * (rewards + discounts * next_vs - values)
    return VTraceReturns(jax.lax.stop_gradient(vs), jax.lax.stop_gradient(pg_advantages))
