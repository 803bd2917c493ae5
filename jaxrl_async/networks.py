"""Flax modules: MLP torso and the heads the agents use."""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


def _dense(features: int, scale: float) -> nn.Dense:
    return nn.Dense(features, kernel_init=nn.initializers.orthogonal(scale),
                    bias_init=nn.initializers.zeros)


class MLP(nn.Module):
    """Flattens everything after the batch axis, then Dense + activation per hidden size."""

    hidden_sizes: Sequence[int]
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x):
        x = x.reshape(x.shape[0], -1).astype(jnp.float32)
        for size in self.hidden_sizes:
            x = ACTIVATIONS[self.activation](_dense(size, np.sqrt(2))(x))
        return x


class CategoricalPolicy(nn.Module):
    """Logits [B, num_actions]."""

    num_actions: int
    hidden_sizes: Sequence[int]
    activation: str = "tanh"

    @nn.compact
    def __call__(self, obs):
        return _dense(self.num_actions, 0.01)(MLP(self.hidden_sizes, self.activation)(obs))


class GaussianPolicy(nn.Module):
    """Mean [B, A] and a state-independent log standard deviation [A]."""

    action_dim: int
    hidden_sizes: Sequence[int]
    activation: str = "tanh"

    @nn.compact
    def __call__(self, obs):
        mean = _dense(self.action_dim, 0.01)(MLP(self.hidden_sizes, self.activation)(obs))
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
        return mean, log_std


class ValueHead(nn.Module):
    """State value [B]."""

    hidden_sizes: Sequence[int]
    activation: str = "tanh"

    @nn.compact
    def __call__(self, obs):
        return _dense(1, 1.0)(MLP(self.hidden_sizes, self.activation)(obs))[:, 0]


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class SquashedGaussianPolicy(nn.Module):
    """Mean [B, A] and log standard deviation [B, A] of the Gaussian under a tanh squash.

    The log-std is clipped to [LOG_STD_MIN, LOG_STD_MAX]; the small head starts every
    state at mean 0, std 1.
    """

    action_dim: int
    hidden_sizes: Sequence[int]
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs):
        out = _dense(2 * self.action_dim, 0.01)(MLP(self.hidden_sizes, self.activation)(obs))
        mean, log_std = jnp.split(out, 2, axis=-1)
        return mean, jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)


class QValue(nn.Module):
    """Action value Q(obs [B, ...], action [B, A]) -> [B]."""

    hidden_sizes: Sequence[int]
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs, action):
        x = jnp.concatenate([obs.reshape(obs.shape[0], -1).astype(jnp.float32),
                             action.astype(jnp.float32)], axis=-1)
        return _dense(1, 1.0)(MLP(self.hidden_sizes, self.activation)(x))[:, 0]


class QEnsemble(nn.Module):
    """`num` independent QValue critics as one module: (obs, action) -> [num, B].

    The members share the inputs and differ in parameters (stacked on a leading axis),
    so the ensemble runs as one batched matmul per layer instead of `num` calls.
    """

    num: int
    hidden_sizes: Sequence[int]
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs, action):
        ensemble = nn.vmap(QValue, variable_axes={"params": 0}, split_rngs={"params": True},
                           in_axes=None, out_axes=0, axis_size=self.num)
        return ensemble(self.hidden_sizes, self.activation)(obs, action)


class QNetwork(nn.Module):
    """Action values [B, num_actions]; with `dueling`, V(x) + A(x, a) − mean_a A(x, a)
    (Wang et al. 2016) from separate value and advantage layers on a shared torso."""

    num_actions: int
    hidden_sizes: Sequence[int]
    activation: str = "relu"
    dueling: bool = False

    @nn.compact
    def __call__(self, obs):
        x = MLP(self.hidden_sizes, self.activation)(obs)
        advantages = _dense(self.num_actions, 1.0)(x)
        if not self.dueling:
            return advantages
        value = _dense(1, 1.0)(x)
        return value + advantages - advantages.mean(axis=-1, keepdims=True)
