"""Flax modules: the torso every network shares (an encoder for any observation, then an
MLP), the heads the agents use, and the recurrent actor-critic (torso, cell, heads)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.nn import conv
from jaxrl_async.nn.cells import CELLS, MemorySpec
from jaxrl_async.nn.initializers import orthogonal
from jaxrl_async.nn.torsos import IMAGE_TORSOS

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}

# The observation entry that marks the legal actions (a bool vector over them), where an
# env has one (`envs/suites`). It is not encoded: the policy heads mask with it.
MASK_KEY = "action_mask"


class TorsoSpec(NamedTuple):
    """The body of every network of an agent: each observation leaf encoded (images by
    the named image torso or the conv layers, if any; everything else flattened),
    concatenated, then the MLP."""

    hidden_sizes: tuple[int, ...]
    activation: str
    conv: tuple[tuple[int, int, int], ...] = ()  # (channels, kernel, stride) per layer
    # LayerNorm between every hidden layer (dense or conv) and its activation (PQN's
    # network, Gallici et al. 2024); off, the parameter tree has no LayerNorm at all
    layer_norm: bool = False
    # A published image torso (image_torsos.IMAGE_TORSOS: nature, impala) for every image
    # leaf, in place of `conv`; "" for none
    image: str = ""


def _dense(features: int, scale: float) -> nn.Dense:
    return nn.Dense(features, kernel_init=orthogonal(scale), bias_init=nn.initializers.zeros)


def _normed(x, layer_norm: bool):
    """`x` through a LayerNorm (its own scale and bias) over the last axis, if asked."""
    return nn.LayerNorm()(x) if layer_norm else x


def observation_leaves(obs) -> list:
    """The arrays an encoder reads from `obs` [B, ...]: the array itself, or a dict's
    entries in key order, the action mask left out."""
    if isinstance(obs, dict):
        return [obs[k] for k in sorted(obs) if k != MASK_KEY]
    return jax.tree.leaves(obs)


def action_mask(obs):
    """The legal actions [B, A] in `obs`, or None where the env has no mask. A row with no
    legal action (some suites at an episode's end) counts every action legal, so that
    nothing downstream is asked to choose among none."""
    if not isinstance(obs, dict) or MASK_KEY not in obs:
        return None
    mask = obs[MASK_KEY].astype(bool)
    return mask | ~mask.any(axis=-1, keepdims=True)


def mask_logits(logits, obs):
    """`logits` [B, A] with illegal actions at -1e9 (finite: entropy stays 0·x, not NaN)."""
    mask = action_mask(obs)
    return logits if mask is None else jnp.where(mask, logits, -1e9)


class Encoder(nn.Module):
    """Observation (array or dict of arrays, batch first) -> features [B, F].

    With an image torso (`image`) or conv layers, every image leaf ([B, H, W, C]) goes
    through them (uint8 scaled to [0, 1]); every other leaf is flattened. The features of
    all leaves are concatenated.
    """

    conv: tuple[tuple[int, int, int], ...] = ()
    activation: str = "relu"
    layer_norm: bool = False  # over the channels of every conv layer's output
    image: str = ""  # TorsoSpec.image

    @nn.compact
    def __call__(self, obs):
        features = []
        for x in observation_leaves(obs):
            scale = 1.0 / 255 if x.dtype == jnp.uint8 else 1.0
            x = x.astype(jnp.float32) * scale
            if self.image and x.ndim == 4:
                x = IMAGE_TORSOS[self.image](self.layer_norm)(x)
            elif self.conv and x.ndim == 4:
                for channels, kernel, stride in self.conv:
                    x = nn.Conv(
                        channels,
                        (kernel, kernel),
                        (stride, stride),
                        padding="SAME",
                        kernel_init=orthogonal(np.sqrt(2)),
                        bias_init=nn.initializers.zeros,
                        conv_general_dilated=conv.conv_general_dilated,
                    )(x)
                    x = ACTIVATIONS[self.activation](_normed(x, self.layer_norm))
            features.append(x.reshape(x.shape[0], -1))
        return jnp.concatenate(features, axis=-1)


class MLP(nn.Module):
    """Dense (+ LayerNorm) + activation per hidden size, on features [B, F]."""

    hidden_sizes: Sequence[int]
    activation: str = "tanh"
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x):
        for size in self.hidden_sizes:
            x = ACTIVATIONS[self.activation](_normed(_dense(size, np.sqrt(2))(x), self.layer_norm))
        return x


def torso(spec: TorsoSpec, obs, extra=None):
    """Encoder then MLP: observation -> features [B, hidden_sizes[-1]]; `extra` [B, E] (a
    critic's action) joins the encoded observation. Called inside a head's compact
    `__call__`, so its layers are the head's own (an MLP torso has the parameter tree,
    and hence the initial values, of a plain MLP head)."""
    x = Encoder(spec.conv, spec.activation, spec.layer_norm, spec.image)(obs)
    if extra is not None:
        x = jnp.concatenate([x, extra.astype(jnp.float32)], axis=-1)
    return MLP(spec.hidden_sizes, spec.activation, spec.layer_norm)(x)


class CategoricalPolicy(nn.Module):
    """Logits [B, num_actions], illegal actions (where the observation has a mask) at -1e9."""

    num_actions: int
    torso: TorsoSpec

    @nn.compact
    def __call__(self, obs):
        return mask_logits(_dense(self.num_actions, 0.01)(torso(self.torso, obs)), obs)


class GaussianPolicy(nn.Module):
    """Mean [B, A] and a state-independent log standard deviation [A]."""

    action_dim: int
    torso: TorsoSpec

    @nn.compact
    def __call__(self, obs):
        mean = _dense(self.action_dim, 0.01)(torso(self.torso, obs))
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
        return mean, log_std


class ValueHead(nn.Module):
    """State value [B]."""

    torso: TorsoSpec

    @nn.compact
    def __call__(self, obs):
        return _dense(1, 1.0)(torso(self.torso, obs))[:, 0]


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class SquashedGaussianPolicy(nn.Module):
    """Mean [B, A] and log standard deviation [B, A] of the Gaussian under a tanh squash.

    The log-std is clipped to [LOG_STD_MIN, LOG_STD_MAX]; the small head starts every
    state at mean 0, std 1.
    """

    action_dim: int
    torso: TorsoSpec

    @nn.compact
    def __call__(self, obs):
        out = _dense(2 * self.action_dim, 0.01)(torso(self.torso, obs))
        mean, log_std = jnp.split(out, 2, axis=-1)
        return mean, jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)


class DeterministicPolicy(nn.Module):
    """A deterministic action tanh(dense(torso)) in (-1, 1)^A [B, A] (TD3's actor); the
    small head starts every state near 0, the middle of the bounds."""

    action_dim: int
    torso: TorsoSpec

    @nn.compact
    def __call__(self, obs):
        return jnp.tanh(_dense(self.action_dim, 0.01)(torso(self.torso, obs)))


class QValue(nn.Module):
    """Action value Q(obs [B, ...], action [B, A]) -> [B]."""

    torso: TorsoSpec

    @nn.compact
    def __call__(self, obs, action):
        return _dense(1, 1.0)(torso(self.torso, obs, action))[:, 0]


class QEnsemble(nn.Module):
    """`num` independent QValue critics as one module: (obs, action) -> [num, B].

    The members share the inputs and differ in parameters (stacked on a leading axis),
    so the ensemble runs as one batched matmul per layer instead of `num` calls.
    """

    num: int
    torso: TorsoSpec

    @nn.compact
    def __call__(self, obs, action):
        ensemble = nn.vmap(
            QValue,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=0,
            axis_size=self.num,
        )
        return ensemble(self.torso)(obs, action)


def ensemble_member(params, i: int):
    """Member i of a QEnsemble's parameters, as a QValue's (one critic's forward pass
    where only it is needed, as in TD3's actor loss)."""
    return {"params": jax.tree.map(lambda x: x[i], params["params"]["VmapQValue_0"])}


class QNetwork(nn.Module):
    """Action values [B, num_actions]; with `dueling`, V(x) + A(x, a) − mean_a A(x, a)
    (Wang et al. 2016) from separate value and advantage layers on a shared torso.
    Illegal actions (where the observation has a mask) get -1e9, so that neither the
    greedy action nor a target's max picks them."""

    num_actions: int
    torso: TorsoSpec
    dueling: bool = False

    @nn.compact
    def __call__(self, obs):
        x = torso(self.torso, obs)
        advantages = _dense(self.num_actions, 1.0)(x)
        if self.dueling:
            advantages = _dense(1, 1.0)(x) + advantages - advantages.mean(axis=-1, keepdims=True)
        return mask_logits(advantages, obs)


class Torso(nn.Module):
    """`torso` as a module of its own (for networks built in `setup`)."""

    spec: TorsoSpec

    @nn.compact
    def __call__(self, obs):
        return torso(self.spec, obs)


class RecurrentCore(nn.Module):
    """Torso then recurrent cell, the body of every recurrent network, called in parts so
    that a learner can embed and project every step of a sequence in one batched call and
    scan only the cell's recurrence (`cells.py`): embed(obs [N, ...]) -> x [N, F];
    project(x) -> xp;  recur(carry, xp) -> (carry, h [N, size]);  step(carry, x) =
    recur(carry, project(x)). Subclasses add their heads in `setup` after this one's."""

    torso: TorsoSpec
    memory: MemorySpec

    def setup(self):
        self.body = Torso(self.torso)
        self.cell = CELLS[self.memory.cell](self.memory.size)

    def embed(self, obs):
        return self.body(obs)

    def project(self, x):
        return self.cell.project(x)

    def recur(self, carry, xp):
        return self.cell.recur(carry, xp)

    def step(self, carry, x):
        return self.cell(carry, x)


class _Heads:
    """A policy head and a value head on features h [N, F], mixed into a module with
    `num_actions` and `action_dim` fields (one of them 0) that calls `_setup_heads` in
    its `setup`: policy(h, obs) -> logits [N, A] masked with the observation's action
    mask, or (mean [N, A], log_std [A]); value(h) -> [N]."""

    num_actions: int
    action_dim: int

    def _setup_heads(self):
        self.policy_out = _dense(self.num_actions or self.action_dim, 0.01)
        self.value_out = _dense(1, 1.0)
        if self.action_dim:
            module = cast(nn.Module, self)
            self.log_std = module.param("log_std", nn.initializers.zeros, (self.action_dim,))

    def policy(self, h, obs):
        out = self.policy_out(h)
        return mask_logits(out, obs) if self.num_actions else (out, self.log_std)

    def value(self, h):
        return self.value_out(h)[:, 0]


class SharedActorCritic(_Heads, nn.Module):
    """One torso whose features feed a policy head and a value head (`agent.shared_torso`:
    the actor-critic of the Atari PPO and IMPALA papers, one image torso's cost instead of
    two): __call__(obs) -> (policy head's output, value [N]); policy_of(obs) and
    value_of(obs), each alone."""

    torso: TorsoSpec
    num_actions: int = 0  # categories of a discrete action, else 0
    action_dim: int = 0  # length of a continuous action vector, else 0

    def setup(self):
        self.body = Torso(self.torso)
        self._setup_heads()

    def policy_of(self, obs):
        return self.policy(self.body(obs), obs)

    def value_of(self, obs):
        return self.value(self.body(obs))

    def __call__(self, obs):
        h = self.body(obs)
        return self.policy(h, obs), self.value(h)


class RecurrentActorCritic(_Heads, RecurrentCore):
    """The recurrent core (torso, cell) whose output feeds a policy head and a value head
    (`_Heads`)."""

    num_actions: int = 0  # categories of a discrete action, else 0
    action_dim: int = 0  # length of a continuous action vector, else 0

    def setup(self):
        super().setup()
        self._setup_heads()

    def __call__(self, carry, obs):
        carry, h = self.step(carry, self.embed(obs))
        return self.policy(h, obs), self.value(h)
