"""What the actor-critic agents (PPO, IMPALA) share besides their networks
(`actor_critic.py`): the learner state, truncation, optimizers, minibatches, SGD.

Each agent keeps its own loss; this module holds the parts that would otherwise be
copied between agent files.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from jaxrl_async.errors import ConfigError
from jaxrl_async.types import Params


class ActorCriticState(struct.PyTreeNode):
    """The learner state of an actor-critic agent."""

    params: Params  # the ActorCritic's (memoryless: {"actor": ..., "critic": ...})
    opt_state: optax.OptState  # over the parameters as one flat vector (see `sgd`)
    hparams: dict  # the SWEEPABLE fields as traced scalars (`initial_hparams`)


def fold_truncation(rewards, next_values, terminated, truncated, gamma):
    """(rewards, discounts) [T, B] for estimators that only know episode ends.

    next_values = V(x'_t), the observation after step t before any auto-reset. A
    truncating step bootstraps from it: γ·V(x'_t) joins its reward and the discount is
    0 there, as it is at terminations, so the trace is cut wherever an episode ended.
    """
    terminated = terminated.astype(jnp.float32)
    truncated = truncated.astype(jnp.float32)
    rewards = rewards + gamma * truncated * (1.0 - terminated) * next_values
    discounts = gamma * (1.0 - jnp.maximum(terminated, truncated))
    return rewards, discounts


class Optimizer(NamedTuple):
    """An optax direction (Adam's or RMSProp's, at unit rate) scaled at each step by the
    run's learning rate, after clipping the gradient's global norm: both are
    hyperparameters of the learner state (traced), so runs with other values share one
    program. Rounds exactly as optax.adam / optax.rmsprop with the same (annealed) rate."""

    direction: optax.GradientTransformation
    anneal_steps: int = 0  # > 0: the rate falls linearly to 0 over this many steps
    clip: bool = True

    def init(self, flat):
        return self.direction.init(flat), jnp.zeros([], jnp.int32)  # (its state, steps)

    def update(self, grads, opt_state, flat, hp):
        """(updates, opt_state) for `hp`, a config bound to the run's hyperparameters
        (`configs.bind`): its learning_rate and max_grad_norm."""
        state, count = opt_state
        if self.clip:
            grads, _ = optax.clip_by_global_norm(hp.max_grad_norm).update(grads, None)
        direction, state = self.direction.update(grads, state, flat)
        rate = hp.learning_rate
        if self.anneal_steps:
            rate = optax.linear_schedule(rate, 0.0, self.anneal_steps)(count)
        return -rate * direction, (state, optax.safe_int32_increment(count))


def make_optimizer(
    name: str,
    anneal: bool,
    num_grad_steps: int,
    eps: float,
    adam_b1: float = 0.9,
    clip: bool = True,
) -> Optimizer:
    """Global-norm clipping (unless `clip` is off), then Adam (first-moment decay
    `adam_b1`) or RMSProp, the rate annealed linearly to 0 over `num_grad_steps` if asked."""
    if name == "adam":
        direction = optax.scale_by_adam(b1=adam_b1, eps=eps)
    elif name == "rmsprop":
        direction = optax.scale_by_rms(decay=0.99, eps=eps)
    else:
        raise ConfigError(f"unknown optimizer {name!r} (available: adam, rmsprop)")
    return Optimizer(direction, num_grad_steps if anneal else 0, clip)


def initial_hparams(config) -> dict[str, jax.Array]:
    """The learner state's hyperparameters: the config's SWEEPABLE fields as float32
    scalars (a sweep sets each run's own, `trainer.train(points=...)`)."""
    return {key: jnp.float32(getattr(config, key)) for key in config.SWEEPABLE}


def init_opt_state(optimizer: Optimizer, params):
    """The optimizer state for `params` as one flat vector (the layout `sgd` updates)."""
    return optimizer.init(ravel_pytree(params)[0])


def env_minibatches(key, data, num_minibatches: int, axis_name: str | None = None):
    """`data` [T, B, ...] cut into minibatches stacked [M, T/M * B, ...].

    Each env's time steps are shuffled by a permutation keyed by the env's global
    index (its position in the batch over all devices), and minibatch m takes the
    m-th block of every env's shuffled steps. A minibatch is then the same set of
    transitions however many devices hold the batch, each device holding its envs'.
    """
    T, B = jax.tree.leaves(data)[0].shape[:2]
    first = 0 if axis_name is None else jax.lax.axis_index(axis_name) * B
    env_keys = jax.vmap(jax.random.fold_in, (None, 0))(key, first + jnp.arange(B))
    perms = jax.vmap(lambda k: jax.random.permutation(k, T))(env_keys)  # [B, T]

    def split(x):
        x = jnp.take_along_axis(x, perms.T.reshape(T, B, *([1] * (x.ndim - 2))), axis=0)
        x = x.reshape(num_minibatches, T // num_minibatches, B, *x.shape[2:])
        return x.reshape(num_minibatches, -1, *x.shape[3:])

    return jax.tree.map(split, data)


def env_group_minibatches(key, data, num_minibatches: int):
    """`data` [T, B, ...] cut along envs into minibatches stacked [M, T, B/M, ...].

    Minibatch m holds the envs whose index is m modulo M, in an order shuffled per
    epoch. Each device holds a contiguous block of envs whose size M divides, so a
    minibatch is the same set of envs however many devices hold the batch, and every
    device holds an equal share of it. Whole sequences stay together, for estimators
    that run backwards in time (V-trace) and cells that run forwards.
    """
    B = jax.tree.leaves(data)[0].shape[1]  # this device's envs
    if B % num_minibatches:
        raise ConfigError(
            f"agent.num_minibatches={num_minibatches} does not divide "
            f"the {B} envs each device holds"
        )
    order = jax.random.permutation(key, num_minibatches)

    def split(x):
        T, B = x.shape[:2]
        x = x.reshape(T, B // num_minibatches, num_minibatches, *x.shape[2:])
        return jnp.moveaxis(x, 2, 0)[order]

    return jax.tree.map(split, data)


def standardize_minibatches(x, axis_name: str | None):
    """x [M, ...] standardised per minibatch: (x - mean) / (std + 1e-8), the mean and std of
    minibatch m over all its elements on every device (equal sizes per device).

    For all M minibatches at once, before the SGD loop: two all-reduces of [M] values an
    epoch instead of two per minibatch inside it (on several devices each all-reduce is a
    rendezvous that the minibatch's small matmuls cannot hide)."""
    axes = tuple(range(1, x.ndim))
    pmean = (lambda v: v) if axis_name is None else (lambda v: jax.lax.pmean(v, axis_name))
    expand = (slice(None), *([None] * len(axes)))
    mean = pmean(jnp.mean(x, axis=axes))[expand]
    std = jnp.sqrt(pmean(jnp.mean(jnp.square(x - mean), axis=axes)))[expand]
    return (x - mean) / (std + 1e-8)


class StepRule(NamedTuple):
    """How a gradient step moves the parameters: the optimizer, the config bound to the
    run's hyperparameters that it reads (`Optimizer.update`), and the device axis the
    gradients and metrics are averaged over (None: one device)."""

    optimizer: Optimizer
    hp: Any
    axis_name: str | None = None


def sgd(loss_fn, rule: StepRule, params, opt_state, epoch_keys, minibatches):
    """One pass over `minibatches(key)` (a pytree stacked [M, ...]) per key of
    `epoch_keys` [E], each minibatch one step of `rule`.

    loss_fn(params, minibatch) -> (loss, metrics). Returns (params, opt_state, metrics
    averaged over all steps, with "grad_norm" added). The parameters travel through
    the loop as one flat vector: the optimizer then runs as a handful of fused ops
    instead of several per parameter leaf, which is faster on CPU.

    With `rule.axis_name`, each device holds an equal slice of every minibatch;
    gradients and metrics are averaged over devices (`flat_grad_step`).
    """
    flat, unravel = ravel_pytree(params)

    def sgd_step(carry, mb):
        flat, opt_state = carry
        flat, opt_state, metrics, _ = flat_grad_step(
            lambda p, b: loss_fn(unravel(p), b), rule, flat, opt_state, mb
        )
        return (flat, opt_state), metrics

    def epoch(carry, epoch_key):
        return jax.lax.scan(sgd_step, carry, minibatches(epoch_key))

    (flat, opt_state), metrics = jax.lax.scan(epoch, (flat, opt_state), epoch_keys)
    return unravel(flat), opt_state, jax.tree.map(jnp.mean, metrics)


def flat_grad_step(loss_fn, rule: StepRule, flat, opt_state, batch=None):
    """One step of `rule` on a flat parameter vector: (flat, opt_state, metrics, aux).

    loss_fn(flat, batch) -> (loss, metrics) or (loss, (metrics, aux)), a mean over this
    device's share of the batch; aux is returned as this device computed it (per-sample
    values such as TD errors). With `rule.axis_name`, the gradient and the metrics are
    averaged over devices (every device holds an equal share, so that is the gradient of
    the whole batch's loss), as one vector: one all-reduce, not one per parameter leaf
    (between processes each all-reduce is a network round trip). A "grad_norm" metric
    is added.
    """

    def loss_and_aux(flat):
        loss, out = loss_fn(flat, batch)
        metrics, aux = out if isinstance(out, tuple) else (out, None)
        return loss, (metrics, aux)

    grads, (metrics, aux) = jax.grad(loss_and_aux, has_aux=True)(flat)
    if rule.axis_name is not None:
        packed, unpack = ravel_pytree((grads, metrics))
        grads, metrics = unpack(jax.lax.pmean(packed, rule.axis_name))
    updates, opt_state = rule.optimizer.update(grads, opt_state, flat, rule.hp)
    metrics["grad_norm"] = jnp.sqrt(jnp.sum(jnp.square(grads)))
    return flat + updates, opt_state, metrics, aux
