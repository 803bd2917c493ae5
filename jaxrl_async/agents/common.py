"""What the actor-critic agents (PPO, IMPALA) share: networks, acting, truncation, SGD.

Each agent keeps its own loss; this module holds the parts that would otherwise be
copied between agent files.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from jaxrl_async import distributions as D
from jaxrl_async.envs.spec import EnvSpec, obs_zeros
from jaxrl_async.errors import ConfigError
from jaxrl_async.networks import CategoricalPolicy, GaussianPolicy, TorsoSpec, ValueHead


@struct.dataclass
class ActorCriticState:
    """The learner state of an actor-critic agent."""

    params: dict  # {"actor": ..., "critic": ...}
    opt_state: optax.OptState  # over the parameters as one flat vector (see `sgd`)


class ActorCritic(NamedTuple):
    """A policy network and a state-value network for one env spec, as pure functions.

    init:   key -> params {"actor": ..., "critic": ...}
    act:    (params, obs [B, ...], keys [B], clock=None) -> (action [B, ...],
            extras {"log_prob"[, "raw_action"]}), one key per env
    policy: (actor_params, obs [N, ...]) -> (log_prob(action [N, ...]) -> [N], entropy() -> [N])
    value:  (critic_params, obs [N, ...]) -> [N]
    scored_action: trajectory -> the actions as the policy scored them (pre-clipping ones
            for a Gaussian policy, whose env actions are clipped to the bounds)
    greedy: (params, obs [B, ...]) -> action [B, ...], the most likely action: the argmax
            of the logits, or the Gaussian's mean clipped to the bounds
    """

    init: Callable
    act: Callable
    policy: Callable
    value: Callable
    scored_action: Callable
    greedy: Callable


def make_actor_critic(spec: EnvSpec, torso: TorsoSpec, algo: str) -> ActorCritic:
    """Categorical policy for discrete actions, Gaussian for a vector of continuous ones."""
    if spec.discrete:
        actor = CategoricalPolicy(spec.num_actions, torso)
    else:
        if len(spec.action_shape) != 1:
            raise ConfigError(f"{algo} needs a vector action, got shape {spec.action_shape}")
        actor = GaussianPolicy(spec.action_shape[0], torso)
        low, high = jnp.asarray(spec.action_low), jnp.asarray(spec.action_high)
    critic = ValueHead(torso)

    def init(key):
        actor_key, critic_key = jax.random.split(key)
        dummy = obs_zeros(spec)
        return {"actor": actor.init(actor_key, dummy), "critic": critic.init(critic_key, dummy)}

    def act(params, obs, key, clock=None):
        out = actor.apply(params["actor"], obs)
        if spec.discrete:
            action = D.categorical_sample(key, out)
            return action, {"log_prob": D.categorical_log_prob(out, action)}
        mean, log_std = out
        raw = D.gaussian_sample(key, mean, log_std)
        extras = {"log_prob": D.gaussian_log_prob(mean, log_std, raw), "raw_action": raw}
        return jnp.clip(raw, low, high).astype(spec.action_dtype), extras

    def policy(actor_params, obs):
        out = actor.apply(actor_params, obs)
        if spec.discrete:
            return (lambda a: D.categorical_log_prob(out, a)), (lambda: D.categorical_entropy(out))
        mean, log_std = out
        return (lambda a: D.gaussian_log_prob(mean, log_std, a)), \
            (lambda: D.gaussian_entropy(mean, log_std))

    def scored_action(traj):
        return traj.action if spec.discrete else traj.extras["raw_action"]

    def greedy(params, obs):
        out = actor.apply(params["actor"], obs)
        if spec.discrete:
            return jnp.argmax(out, axis=-1).astype(jnp.int32)
        return jnp.clip(out[0], low, high).astype(spec.action_dtype)

    return ActorCritic(init=init, act=act, policy=policy, value=critic.apply,
                       scored_action=scored_action, greedy=greedy)


def concat_obs(a, b):
    """Two observation batches (arrays or dicts of them) as one, `a`'s rows first."""
    return jax.tree.map(lambda x, y: jnp.concatenate([x, y]), a, b)


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


def make_optimizer(name: str, learning_rate: float, anneal: bool, num_grad_steps: int,
                   max_grad_norm: float, eps: float,
                   adam_b1: float = 0.9) -> optax.GradientTransformation:
    """Global-norm clipping, then Adam (first-moment decay `adam_b1`) or RMSProp, the rate
    annealed linearly to 0 if asked."""
    lr = (optax.linear_schedule(learning_rate, 0.0, num_grad_steps) if anneal
          else learning_rate)
    if name == "adam":
        opt = optax.adam(lr, b1=adam_b1, eps=eps)
    elif name == "rmsprop":
        opt = optax.rmsprop(lr, decay=0.99, eps=eps)
    else:
        raise ConfigError(f"unknown optimizer {name!r} (available: adam, rmsprop)")
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), opt)


def init_opt_state(optimizer: optax.GradientTransformation, params):
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


def global_mean(x, axis_name: str | None):
    """Mean over all elements of x on every device (equal sizes per device)."""
    m = jnp.mean(x)
    return m if axis_name is None else jax.lax.pmean(m, axis_name)


def sgd(loss_fn, optimizer, params, opt_state, key, num_epochs: int, minibatches,
        axis_name: str | None = None):
    """num_epochs passes over `minibatches(epoch_key)` (a pytree stacked [M, ...]).

    loss_fn(params, minibatch) -> (loss, metrics). Returns (params, opt_state, metrics
    averaged over all steps, with "grad_norm" added). The parameters travel through
    the loop as one flat vector: the optimizer then runs as a handful of fused ops
    instead of several per parameter leaf (2x faster on CPU).

    With `axis_name`, each device holds an equal slice of every minibatch; gradients and
    metrics are averaged over devices (`flat_grad_step`).
    """
    flat, unravel = ravel_pytree(params)

    def sgd_step(carry, mb):
        flat, opt_state, metrics, _ = flat_grad_step(
            lambda p, b: loss_fn(unravel(p), b), optimizer, *carry, mb, axis_name)
        return (flat, opt_state), metrics

    def epoch(carry, epoch_key):
        return jax.lax.scan(sgd_step, carry, minibatches(epoch_key))

    (flat, opt_state), metrics = jax.lax.scan(
        epoch, (flat, opt_state), jax.random.split(key, num_epochs))
    return unravel(flat), opt_state, jax.tree.map(jnp.mean, metrics)


def flat_grad_step(loss_fn, optimizer, flat, opt_state, batch, axis_name: str | None = None):
    """One optimizer step on a flat parameter vector: (flat, opt_state, metrics, aux).

    loss_fn(flat, batch) -> (loss, metrics) or (loss, (metrics, aux)), a mean over this
    device's share of the batch; aux is returned as this device computed it (per-sample
    values such as TD errors). With `axis_name`, the gradient and the metrics are
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
    if axis_name is not None:
        packed, unpack = ravel_pytree((grads, metrics))
        grads, metrics = unpack(jax.lax.pmean(packed, axis_name))
    updates, opt_state = optimizer.update(grads, opt_state, flat)
    metrics["grad_norm"] = jnp.sqrt(jnp.sum(jnp.square(grads)))
    return flat + updates, opt_state, metrics, aux
