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

import jax
import jax.numpy as jnp

from jaxrl_async.agents.common import (
    ActorCriticState,
    fold_truncation,
    init_opt_state,
    make_actor_critic,
    make_optimizer,
    sgd,
)
from jaxrl_async.agents.configs import IMPALAConfig
from jaxrl_async.errors import ConfigError
from jaxrl_async.returns import vtrace
from jaxrl_async.types import Agent, BuildContext


def make_impala(config: IMPALAConfig, ctx: BuildContext) -> Agent:
    net = make_actor_critic(ctx.spec, config.torso_spec(), "impala")
    num_grad_steps = ctx.num_updates * config.num_epochs * config.num_minibatches
    optimizer = make_optimizer(config.optimizer, config.learning_rate, config.anneal_lr,
                               num_grad_steps, config.max_grad_norm, config.optimizer_eps,
                               config.adam_b1)

    def init(key):
        params = net.init(key)
        return ActorCriticState(params, init_opt_state(optimizer, params))

    def loss_fn(params, mb):
        """mb: whole rollouts of some envs, time-major [T, b, ...]."""
        T, b = mb["reward"].shape
        flat = lambda x: jax.tree.map(lambda y: y.reshape(T * b, *y.shape[2:]), x)  # noqa: E731
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
            # KL(behaviour || current) estimated from the actions taken: mean(rho - 1 - log rho),
            # >= 0 per sample. How far the learner's policy has moved from the actor's.
            "behaviour_kl": jnp.mean(rhos - 1.0 - log_rhos),
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
