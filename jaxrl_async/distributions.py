"""The two action distributions PPO needs, as small pure functions over their parameters."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

_LOG_2PI = float(np.log(2 * np.pi))


def categorical_sample(keys, logits):
    """One draw per row of logits [B, A], with keys [B] (one per env)."""
    return jax.vmap(jax.random.categorical)(keys, logits).astype(jnp.int32)


def categorical_log_prob(logits, action):
    log_p = jax.nn.log_softmax(logits)
    return jnp.take_along_axis(log_p, action[..., None].astype(jnp.int32), axis=-1)[..., 0]


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
