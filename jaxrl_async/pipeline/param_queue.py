"""The actor's parameter queue: the last L parameter versions, so that the actor acts
with the parameters of L learner updates ago (the parameter lag, as data)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct


class ParamQueue(struct.PyTreeNode):
    """The last L parameter versions, oldest first: the actor acts with the oldest, so it
    stays L learner updates behind; each tick pushes the newest and drops the oldest."""

    params: Any  # [L, ...]
    versions: jax.Array  # int32 [L] the learner update count of each


def queue_init(params, lag: int) -> ParamQueue:
    return ParamQueue(
        jax.tree.map(lambda p: jnp.broadcast_to(p, (lag, *p.shape)), params),
        jnp.zeros((lag,), jnp.int32),
    )


def queue_oldest(queue: ParamQueue):
    """(params, version) at the front of the queue: what the actor uses."""
    return jax.tree.map(lambda q: q[0], queue.params), queue.versions[0]


def _shift(q, new):
    return jnp.concatenate([q[1:], new[None]])


def queue_push(queue: ParamQueue, params, version) -> ParamQueue:
    return ParamQueue(jax.tree.map(_shift, queue.params, params), _shift(queue.versions, version))
