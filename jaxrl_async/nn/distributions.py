"""The action distributions the agents need, as small pure functions over their parameters."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

_LOG_2PI = float(np.log(2 * np.pi))


def categorical_sample(keys, logits):
    """One draw per row of logits [B, A], with keys [B] (one per env)."""
    return jax.vmap(jax.random.categorical)(keys, logits).astype(jnp.int32)


def categorical_log_prob(logits, action):
    """log p(action) by selecting with a one-hot mask: the same value as indexing, and its
    gradient is a select instead of a scatter (three scatter kernels in every PPO gradient
    step on CPU)."""
    log_p = jax.nn.log_softmax(logits)
    chosen = action[..., None] == jnp.arange(logits.shape[-1])
    return jnp.sum(jnp.where(chosen, log_p, 0.0), axis=-1)


def categorical_entropy(logits):
    log_p = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)


def gaussian_sample(keys, mean, log_std):
    """One draw per row of mean [B, A], with keys [B] (one per env)."""
    noise = jax.vmap(lambda k: jax.random.normal(k, mean.shape[1:], mean.dtype))(keys)
    return mean + jnp.exp(log_std) * noise


def gaussian_log_prob(mean, log_std, action):
    z = (action - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * z**2 - log_std - 0.5 * _LOG_2PI, axis=-1)


def gaussian_entropy(mean, log_std):
    return jnp.broadcast_to(jnp.sum(log_std + 0.5 * (1.0 + _LOG_2PI)), mean.shape[:-1])


def tanh_log_det_jacobian(pre_tanh):
    """sum_i log(1 - tanh(u_i)^2) over the last axis, without cancelling for large |u|.

    Uses 1 - tanh(u)^2 = 4 / (e^u + e^-u)^2, so log(1 - tanh(u)^2) = 2 (log 2 - u -
    softplus(-2u)), exact in floating point where the direct form rounds to log(0).
    """
    return jnp.sum(2.0 * (np.log(2.0) - pre_tanh - jax.nn.softplus(-2.0 * pre_tanh)), axis=-1)


def squashed_gaussian_log_prob(mean, log_std, pre_tanh):
    """log density of tanh(u) at u = pre_tanh [B, A], for u ~ N(mean, exp(log_std)^2).

    The density is of the squashed action in (-1, 1)^A (change of variables).
    """
    return gaussian_log_prob(mean, log_std, pre_tanh) - tanh_log_det_jacobian(pre_tanh)


def squashed_gaussian_sample(keys, mean, log_std):
    """(action [B, A] in (-1, 1), its log density [B]): tanh of one Gaussian draw per row.

    Reparameterised: differentiable in mean and log_std. keys [B], one per row.
    """
    pre_tanh = gaussian_sample(keys, mean, log_std)
    return jnp.tanh(pre_tanh), squashed_gaussian_log_prob(mean, log_std, pre_tanh)
