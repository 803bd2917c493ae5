"""Return estimators shared by agents: small pure functions, time-major [T, B]."""

from __future__ import annotations

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
