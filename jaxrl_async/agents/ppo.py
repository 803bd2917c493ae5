"""Proximal Policy Optimization (Schulman et al. 2017) with GAE, as an Agent.

The actor acts with the policy network alone; the learner evaluates the critic
on the whole trajectory in one batched call. Truncated episodes bootstrap from
V(final observation) by folding γ·V into the reward of the truncating step and
cutting the trace there, so `gae` itself only sees terminations.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from jaxrl_async import distributions as D
from jaxrl_async.agents.base import Agent, BuildContext
from jaxrl_async.errors import ConfigError
from jaxrl_async.networks import ACTIVATIONS, CategoricalPolicy, GaussianPolicy, ValueHead
from jaxrl_async.returns import gae


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    name: str = "ppo"
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    clip_value: bool = True
    ent_coef: float = 0.01
    reward_scale: float = 1.0  # multiplies rewards before GAE (keeps value targets O(1))
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    num_epochs: int = 4
    num_minibatches: int = 4
    normalize_advantages: bool = True
    adam_eps: float = 1e-5
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"

    def __post_init__(self):
        def need(ok, key, requirement):
            if not ok:
                raise ConfigError(f"agent.{key} must be {requirement}, "
                                  f"got {getattr(self, key)!r}")
        need(self.learning_rate > 0, "learning_rate", "> 0")
        need(0 <= self.gamma <= 1, "gamma", "in [0, 1]")
        need(0 <= self.gae_lambda <= 1, "gae_lambda", "in [0, 1]")
        need(self.clip_eps > 0, "clip_eps", "> 0")
        need(self.ent_coef >= 0, "ent_coef", ">= 0")
        need(self.reward_scale > 0, "reward_scale", "> 0")
        need(self.vf_coef >= 0, "vf_coef", ">= 0")
        need(self.max_grad_norm > 0, "max_grad_norm", "> 0")
        need(self.num_epochs >= 1, "num_epochs", ">= 1")
        need(self.num_minibatches >= 1, "num_minibatches", ">= 1")
        need(self.adam_eps > 0, "adam_eps", "> 0")
        need(len(self.hidden_sizes) >= 1 and min(self.hidden_sizes) >= 1,
             "hidden_sizes", "a non-empty list of positive ints")
        need(self.activation in ACTIVATIONS, "activation", f"one of {sorted(ACTIVATIONS)}")

    def check(self, config) -> None:
        """Cross-section checks: minibatches must split the rollout batch evenly."""
        if config.batch_size % self.num_minibatches:
            raise ConfigError(
                f"agent.num_minibatches={self.num_minibatches} does not divide the batch "
                f"env.num_envs * pipeline.rollout_len = {config.batch_size}")


@struct.dataclass
class PPOState:
    params: dict  # {"actor": ..., "critic": ...}
    opt_state: optax.OptState


def make_ppo(config: PPOConfig, ctx: BuildContext) -> Agent:
    spec = ctx.spec
    if spec.discrete:
        actor = CategoricalPolicy(spec.num_actions, config.hidden_sizes, config.activation)
    else:
        if len(spec.action_shape) != 1:
            raise ConfigError(f"ppo needs a vector action, got shape {spec.action_shape}")
        actor = GaussianPolicy(spec.action_shape[0], config.hidden_sizes, config.activation)
        low, high = jnp.asarray(spec.action_low), jnp.asarray(spec.action_high)
    critic = ValueHead(config.hidden_sizes, config.activation)

    batch_size = ctx.num_envs * ctx.rollout_len
    minibatch_size = batch_size // config.num_minibatches
    num_grad_steps = ctx.num_updates * config.num_epochs * config.num_minibatches
    lr = (optax.linear_schedule(config.learning_rate, 0.0, num_grad_steps)
          if config.anneal_lr else config.learning_rate)
    optimizer = optax.chain(optax.clip_by_global_norm(config.max_grad_norm),
                            optax.adam(lr, eps=config.adam_eps))

    def policy(actor_params, obs):
        """(log_prob(action), entropy) functions of the policy at obs."""
        out = actor.apply(actor_params, obs)
        if spec.discrete:
            return (lambda a: D.categorical_log_prob(out, a)), (lambda: D.categorical_entropy(out))
        mean, log_std = out
        return (lambda a: D.gaussian_log_prob(mean, log_std, a)), \
            (lambda: D.gaussian_entropy(mean, log_std))

    def init(key):
        actor_key, critic_key = jax.random.split(key)
        dummy = jnp.zeros((1, *spec.obs_shape), jnp.float32)
        params = {"actor": actor.init(actor_key, dummy), "critic": critic.init(critic_key, dummy)}
        # The optimizer works on the parameters as one flat vector (see learn).
        return PPOState(params, optimizer.init(ravel_pytree(params)[0]))

    def act(params, obs, key):
        out = actor.apply(params["actor"], obs)
        if spec.discrete:
            action = D.categorical_sample(key, out)
            return action, {"log_prob": D.categorical_log_prob(out, action)}
        mean, log_std = out
        raw = D.gaussian_sample(key, mean, log_std)
        extras = {"log_prob": D.gaussian_log_prob(mean, log_std, raw), "raw_action": raw}
        return jnp.clip(raw, low, high).astype(spec.action_dtype), extras

    def loss_fn(params, mb):
        log_prob_fn, entropy_fn = policy(params["actor"], mb["obs"])
        log_prob = log_prob_fn(mb["action"])
        log_ratio = log_prob - mb["log_prob"]
        ratio = jnp.exp(log_ratio)
        adv = mb["advantage"]
        if config.normalize_advantages:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        clipped = jnp.clip(ratio, 1 - config.clip_eps, 1 + config.clip_eps)
        pg_loss = -jnp.mean(jnp.minimum(ratio * adv, clipped * adv))
        value = critic.apply(params["critic"], mb["obs"])
        value_err = jnp.square(value - mb["target"])
        if config.clip_value:
            value_clipped = mb["value"] + jnp.clip(value - mb["value"],
                                                   -config.clip_eps, config.clip_eps)
            value_err = jnp.maximum(value_err, jnp.square(value_clipped - mb["target"]))
        value_loss = 0.5 * jnp.mean(value_err)
        entropy = jnp.mean(entropy_fn())
        total = pg_loss + config.vf_coef * value_loss - config.ent_coef * entropy
        metrics = {
            "loss": total, "pg_loss": pg_loss, "value_loss": value_loss, "entropy": entropy,
            "approx_kl": jnp.mean((ratio - 1) - log_ratio),
            "clip_frac": jnp.mean((jnp.abs(ratio - 1) > config.clip_eps).astype(jnp.float32)),
        }
        return total, metrics

    def learn(state: PPOState, traj, key):
        """traj: Transition pytree, time-major [T, B, ...]."""
        T, B = traj.reward.shape
        obs_both = jnp.concatenate([traj.obs, traj.next_obs]).reshape(2 * T * B, *spec.obs_shape)
        values, next_values = critic.apply(state.params["critic"], obs_both).reshape(2, T, B)
        advantages = advantages_with_truncation(
            values, next_values, config.reward_scale * traj.reward.astype(jnp.float32),
            traj.terminated, traj.truncated, config.gamma, config.gae_lambda)
        action = traj.action if spec.discrete else traj.extras["raw_action"]
        data = {"obs": traj.obs, "action": action, "log_prob": traj.extras["log_prob"],
                "advantage": advantages, "target": advantages + values, "value": values}
        data = jax.tree.map(lambda x: x.reshape(T * B, *x.shape[2:]), data)

        # One flat parameter vector through the SGD loop: the optimizer then runs as a
        # handful of fused ops instead of several per parameter leaf (2x faster on CPU).
        flat, unravel = ravel_pytree(state.params)
        flat_loss = lambda flat, mb: loss_fn(unravel(flat), mb)  # noqa: E731

        def sgd_step(carry, mb):
            flat, opt_state = carry
            grads, metrics = jax.grad(flat_loss, has_aux=True)(flat, mb)
            updates, opt_state = optimizer.update(grads, opt_state, flat)
            metrics["grad_norm"] = jnp.sqrt(jnp.sum(jnp.square(grads)))
            return (flat + updates, opt_state), metrics

        def epoch(carry, epoch_key):
            perm = jax.random.permutation(epoch_key, T * B)
            shuffled = jax.tree.map(
                lambda x: x[perm].reshape(config.num_minibatches, minibatch_size, *x.shape[1:]),
                data)
            return jax.lax.scan(sgd_step, carry, shuffled)

        (flat, opt_state), metrics = jax.lax.scan(
            epoch, (flat, state.opt_state), jax.random.split(key, config.num_epochs))
        return PPOState(unravel(flat), opt_state), jax.tree.map(jnp.mean, metrics)

    return Agent(init=init, act=act, learn=learn, data="trajectory")


def advantages_with_truncation(values, next_values, rewards, terminated, truncated, gamma,
                               lambda_):
    """GAE where truncated episodes bootstrap from V(final observation). All [T, B].

    values = V(x_t); next_values = V(x'_t), the observation after step t before any
    auto-reset. δ_t = r_t + γ(1 − terminated_t)·V(x'_t) − V(x_t) and the trace is cut
    wherever an episode ended. Folding γ·V(x'_t) into the reward of a truncating step
    lets `gae` (which reads V(x_{t+1}) from `values`) see only terminations.
    """
    terminated = terminated.astype(jnp.float32)
    truncated = truncated.astype(jnp.float32)
    rewards = rewards + gamma * truncated * (1.0 - terminated) * next_values
    discounts = gamma * (1.0 - jnp.maximum(terminated, truncated))
    return gae(values, next_values[-1], rewards, discounts, lambda_)

