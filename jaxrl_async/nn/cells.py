"""The recurrent cells (`agent.memory=gru|lstm`) and their unroll over a sequence.

Each cell is split in two: `project(x)`, the input's contribution to every gate (one
Dense), and `recur(carry, xp)`, the step that reads the carry (one Dense on the hidden
state, then the gates). The actor calls both once per env step. The learner, which runs
the cell over whole sequences, projects every step's input in one batched matmul and
scans only `recur`: one small matmul per step instead of one per gate and input, which is
what a latency-bound scan on a CPU pays for; a recurrent config trains faster than with
flax's GRUCell, whose equations these are (docs/performance.md has the cell's cost).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl_async.nn.initializers import orthogonal


class MemorySpec(NamedTuple):
    """The recurrent cell after the torso: `cell` one of CELLS, `size` its units."""

    cell: str
    size: int


def _blockwise_orthogonal(blocks: int):
    """An orthogonal [H, H] initializer per gate of a fused [H, blocks·H] kernel."""

    def init(key, shape, dtype=jnp.float32):
        keys = jax.random.split(key, blocks)
        square = (shape[0], shape[0])
        return jnp.concatenate([orthogonal()(k, square, dtype) for k in keys], axis=-1)

    return init


class GRU(nn.Module):
    """Gated recurrent unit (Cho et al. 2014): r, z = σ(W_x x + W_h h + b), n = tanh(W_xn x
    + b_xn + r ⊙ (W_hn h + b_hn)), h' = (1 − z) ⊙ n + z ⊙ h. Carry h [B, size]."""

    size: int

    def setup(self):
        self.inputs = nn.Dense(3 * self.size)  # lecun-normal, zero bias: r, z, n
        self.hidden = nn.Dense(3 * self.size, use_bias=False, kernel_init=_blockwise_orthogonal(3))
        self.hidden_bias = self.param("hidden_bias", nn.initializers.zeros, (self.size,))

    def project(self, x):
        return self.inputs(x)

    def recur(self, h, xp):
        xr, xz, xn = jnp.split(xp, 3, axis=-1)
        hr, hz, hn = jnp.split(self.hidden(h), 3, axis=-1)
        r = nn.sigmoid(xr + hr)
        z = nn.sigmoid(xz + hz)
        n = jnp.tanh(xn + r * (hn + self.hidden_bias))
        h = (1.0 - z) * n + z * h
        return h, h

    def __call__(self, carry, x):
        return self.recur(carry, self.project(x))


class LSTM(nn.Module):
    """Long short-term memory (Hochreiter & Schmidhuber 1997): gates i, f, o = σ(·), g =
    tanh(·) of W_x x + W_h h + b; c' = f ⊙ c + i ⊙ g, h' = o ⊙ tanh(c'). Carry (c, h)."""

    size: int

    def setup(self):
        self.inputs = nn.Dense(4 * self.size)  # i, f, g, o
        self.hidden = nn.Dense(4 * self.size, use_bias=False, kernel_init=_blockwise_orthogonal(4))

    def project(self, x):
        return self.inputs(x)

    def recur(self, carry, xp):
        c, h = carry
        i, f, g, o = jnp.split(xp + self.hidden(h), 4, axis=-1)
        c = nn.sigmoid(f) * c + nn.sigmoid(i) * jnp.tanh(g)
        h = nn.sigmoid(o) * jnp.tanh(c)
        return (c, h), h

    def __call__(self, carry, x):
        return self.recur(carry, self.project(x))


CELLS = {"gru": GRU, "lstm": LSTM}


def initial_carry(memory: MemorySpec, batch: int):
    """The carry of `batch` envs at an episode's start (zeros: GRU h [batch, size], LSTM
    (c, h))."""
    zeros = jnp.zeros((batch, memory.size))
    return (zeros, zeros) if memory.cell == "lstm" else zeros


def reset_carry(carry, episode_start):
    """`carry` [B, ...] with the envs where `episode_start` [B] back at the initial (zero)
    carry."""

    def reset(c):
        return jnp.where(episode_start.reshape(-1, *([1] * (c.ndim - 1))), 0.0, c).astype(c.dtype)

    return jax.tree.map(reset, carry)


def unroll(recur: Callable, carry, xp, episode_start):
    """The cell over time from `carry` [b, ...], reset where an episode starts as the actor
    did: recur(carry, xp_t) -> (carry, h) one step; xp [T, b, ...] the projected inputs,
    episode_start [T, b]. Returns (h [T, b, size], the carry after each step [T, b, ...])."""

    def step(carry, inputs):
        xp_t, start_t = inputs
        carry, h = recur(reset_carry(carry, start_t), xp_t)
        return carry, (h, carry)

    return jax.lax.scan(step, carry, (xp, episode_start))[1]
