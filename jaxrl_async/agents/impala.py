"""IMPALA (Espeholt et al. 2018): actor-critic with V-trace off-policy correction, as an Agent.

The actor acts with the policy network alone and records the behaviour
log-probabilities. Each learner step re-evaluates the trajectory with the current
parameters: V(x_t), V(x'_t) and log π(a_t|x_t) give V-trace targets and the
importance weights, so the correction also covers data gone stale over several
epochs or minibatches, not only the pipeline's parameter lag. Minibatches split the
batch along envs (B) and keep whole rollouts, since V-trace runs backwards in time.
Truncated episodes bootstrap from V(final observation) as in PPO (`fold_truncation`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jaxrl_async.agents.base import Agent, BuildContext, field_checks
from jaxrl_async.agents.common import (
    ActorCriticState,
    fold_truncation,
    init_opt_state,
    make_actor_critic,
    make_optimizer,
    sgd,
)
from jaxrl_async.errors import ConfigError
from jaxrl_async.returns import vtrace

OPTIMIZERS = ("adam", "rmsprop")


@dataclasses.dataclass(frozen=True)
class IMPALAConfig:
    name: str = "impala"
    learning_rate: float = 1e-3
    anneal_lr: bool = True
    optimizer: str = "adam"
    optimizer_eps: float = 1e-5
    gamma: float = 0.99
    vtrace_lambda: float = 1.0
    clip_rho_threshold: float = 1.0
    clip_pg_rho_threshold: float = 1.0
    baseline_coef: float = 0.5
    ent_coef: float = 0.01
    reward_scale: float = 1.0  # multiplies rewards before V-trace (keeps value targets O(1))
    max_grad_norm: float = 0.5
    num_epochs: int = 1
    num_minibatches: int = 1  # splits the envs (B) of a rollout, each minibatch whole in time
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"

    def __post_init__(self):
        need = field_checks(self)

        need(self.learning_rate > 0, "learning_rate", "> 0")
        need(self.optimizer in OPTIMIZERS, "optimizer", f"one of {list(OPTIMIZERS)}")
        need(self.optimizer_eps > 0, "optimizer_eps", "> 0")
        need(0 <= self.gamma <= 1, "gamma", "in [0, 1]")
        need(0 <= self.vtrace_lambda <= 1, "vtrace_lambda", "in [0, 1]")
        need(self.clip_rho_threshold > 0, "clip_rho_threshold", "> 0")
        need(self.clip_pg_rho_threshold > 0, "clip_pg_rho_threshold", "> 0")
        need(self.baseline_coef >= 0, "baseline_coef", ">= 0")
        need(self.ent_coef >= 0, "ent_coef", ">= 0")
        need(self.reward_scale > 0, "reward_scale", "> 0")
        need(self.max_grad_norm > 0, "max_grad_norm", "> 0")
        need(self.num_epochs >= 1, "num_epochs", ">= 1")
        need(self.num_minibatches >= 1, "num_minibatches", ">= 1")

    def check(self, config) -> None:
        """Cross-section checks: minibatches must split each device's envs evenly."""
        devices = config.pipeline.devices or jax.local_device_count()
        local_envs = config.env.num_envs // devices
        if local_envs % self.num_minibatches:
            where = "" if devices == 1 else f" / {devices} devices = {local_envs} envs per device"
            raise ConfigError(
                f"agent.num_minibatches={self.num_minibatches} does not divide "
                f"env.num_envs={config.env.num_envs}{where} (IMPALA minibatches split the envs)")


def make_impala(config: IMPALAConfig, ctx: BuildContext) -> Agent:
    net = make_actor_critic(ctx.spec, config.hidden_sizes, config.activation, "impala")
    num_grad_steps = ctx.num_updates * config.num_epochs * config.num_minibatches
    optimizer = make_optimizer(config.optimizer, config.learning_rate, config.anneal_lr,
                               num_grad_steps, config.max_grad_norm, config.optimizer_eps)

    def init(key):
        params = net.init(key)
        return ActorCriticState(params, init_opt_state(optimizer, params))

    def loss_fn(params, mb):
        """mb: whole rollouts of some envs, time-major [T, b, ...]."""
        T, b = mb["reward"].shape
        flat = lambda x: x.reshape(T * b, *x.shape[2:])  # noqa: E731
        values = net.value(params["critic"], flat(mb["obs"])).reshape(T, b)
        # V(x'_t) only feeds the targets: evaluated with constant parameters, no backward pass.
        next_values = net.value(jax.lax.stop_gradient(params["critic"]),
                                flat(mb["next_obs"])).reshape(T, b)
        log_prob_fn, entropy_fn = net.policy(params["actor"], flat(mb["obs"]))
        log_prob = log_prob_fn(flat(mb["action"])).reshape(T, b)
        log_rhos = jax.lax.stop_gradient(log_prob) - mb["log_prob"]
        rewards, discounts = fold_truncation(mb["reward"], next_values, mb["terminated"],
                                             mb["truncated"], config.gamma)
        targets = vtrace(jax.lax.stop_gradient(values), next_values[-1], rewards, discounts,
                         log_rhos, lambda_=config.vtrace_lambda,
                         clip_rho_threshold=config.clip_rho_threshold,
                         clip_pg_rho_threshold=config.clip_pg_rho_threshold)
        pg_loss = -jnp.mean(targets.pg_advantages * log_prob)
        value_loss = 0.5 * jnp.mean(jnp.square(targets.vs - values))
        entropy = jnp.mean(entropy_fn())
        total = pg_loss + config.baseline_coef * value_loss - config.ent_coef * entropy
        rhos = jnp.exp(log_rhos)
        # On-policy the recomputed log-probabilities differ from the actor's in the last
        # bits; the tolerance keeps that noise out of the clip fraction.
        clipped = rhos > config.clip_rho_threshold * (1 + 1e-4)
        metrics = {
            "loss": total, "pg_loss": pg_loss, "value_loss": value_loss, "entropy": entropy,
            "rho_mean": jnp.mean(rhos), "rho_clip_frac": jnp.mean(clipped.astype(jnp.float32)),
        }
        return total, metrics

    def learn(state: ActorCriticState, traj, key):
        """traj: Transition pytree, time-major [T, B, ...]."""
        data = {"obs": traj.obs, "next_obs": traj.next_obs, "action": net.scored_action(traj),
                "log_prob": traj.extras["log_prob"],
                "reward": config.reward_scale * traj.reward.astype(jnp.float32),
                "terminated": traj.terminated, "truncated": traj.truncated}
        B = traj.reward.shape[1]  # this device's envs
        if B % config.num_minibatches:
            raise ConfigError(f"agent.num_minibatches={config.num_minibatches} does not divide "
                              f"the {B} envs each device holds")
        params, opt_state, metrics = sgd(
            loss_fn, optimizer, state.params, state.opt_state, key, config.num_epochs,
            lambda epoch_key: env_group_minibatches(epoch_key, data, config.num_minibatches),
            ctx.axis_name)
        return ActorCriticState(params, opt_state), metrics

    return Agent(init=init, act=net.act, learn=learn, data="trajectory",
                 greedy=net.greedy)


def env_group_minibatches(key, data, num_minibatches: int):
    """`data` [T, B, ...] cut along envs into minibatches stacked [M, T, B/M, ...].

    Minibatch m holds the envs whose index is m modulo M, in an order shuffled per
    epoch. Each device holds a contiguous block of envs whose size M divides, so a
    minibatch is the same set of envs however many devices hold the batch, and every
    device holds an equal share of it. Whole rollouts stay together: V-trace runs
    backwards through time.
    """
    order = jax.random.permutation(key, num_minibatches)

    def split(x):
        T, B = x.shape[:2]
        x = x.reshape(T, B // num_minibatches, num_minibatches, *x.shape[2:])
        return jnp.moveaxis(x, 2, 0)[order]

    return jax.tree.map(split, data)
