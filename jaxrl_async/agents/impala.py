"""IMPALA (Espeholt et al. 2018): actor-critic with V-trace off-policy correction, as an Agent.

The actor acts with the policy network alone and records the behaviour
log-probabilities. Each learner step re-evaluates the trajectory with the current
parameters: V(x_t), V(x'_t) and log π(a_t|x_t) give V-trace targets and the
importance weights, so the correction also covers data gone stale over several
epochs or minibatches, not only the pipeline's parameter lag. Minibatches split the
batch along envs (B) and keep whole rollouts, since V-trace runs backwards in time
(and a recurrent network, `agent.memory`, re-runs its cell forwards over them from
the carry the actor stored, `actor_critic.py`). Truncated episodes bootstrap from
V(final observation) as in PPO (`fold_truncation`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl_async.agents.actor_critic import ActorCritic, make_actor_critic
from jaxrl_async.agents.common import (
    ActorCriticState,
    StepRule,
    env_group_minibatches,
    fold_truncation,
    init_opt_state,
    initial_hparams,
    make_optimizer,
    sgd,
)
from jaxrl_async.agents.returns import vtrace
from jaxrl_async.config.agents import IMPALAConfig, bind
from jaxrl_async.types import Agent, BuildContext, LearnOutput, Transition

__all__ = ["env_group_minibatches", "impala_loss", "make_impala"]


def make_impala(config: IMPALAConfig, ctx: BuildContext) -> Agent:
    net = make_actor_critic(
        ctx.spec, config.torso_spec(), "impala", config.memory_spec(), config.shared_torso
    )
    num_grad_steps = ctx.num_updates * config.num_epochs * config.num_minibatches
    optimizer = make_optimizer(
        config.optimizer, config.anneal_lr, num_grad_steps, config.optimizer_eps, config.adam_b1
    )

    def init(key):
        params = net.init(key)
        return ActorCriticState(params, init_opt_state(optimizer, params), initial_hparams(config))

    def learn(state: ActorCriticState, traj: Transition, key: jax.Array) -> LearnOutput:
        """traj: Transition pytree, time-major [T, B, ...]."""
        hp = bind(config, state.hparams)
        data = {
            "obs": traj.obs,
            "next_obs": traj.next_obs,
            "action": net.scored_action(traj),
            "log_prob": traj.extras["log_prob"],
            "reward": hp.reward_scale * traj.reward.astype(jnp.float32),
            "terminated": traj.terminated,
            "truncated": traj.truncated,
            **net.sequence_inputs(traj),
        }
        params, opt_state, metrics = sgd(
            lambda p, mb: impala_loss(net, p, mb, hp),
            StepRule(optimizer, hp, ctx.axis_name),
            state.params,
            state.opt_state,
            jax.random.split(key, config.num_epochs),
            lambda epoch_key: env_group_minibatches(epoch_key, data, config.num_minibatches),
        )
        return LearnOutput(ActorCriticState(params, opt_state, state.hparams), metrics)

    return Agent(
        init=init,
        act=net.act,
        learn=learn,
        data="trajectory",
        greedy=net.greedy,
        init_carry=net.init_carry,
    )


def impala_loss(net: ActorCritic, params, mb, hp):
    """The policy-gradient, baseline and entropy losses on V-trace targets: (loss, metrics).

    mb: whole rollouts of some envs, time-major [T, b, ...]; `hp`: the config bound to the
    run's hyperparameters (`configs.bind`)."""
    scored = net.evaluate(params, mb, next_value=True)
    values, next_values, log_prob = scored.value, scored.next_value, scored.log_prob
    log_rhos = jax.lax.stop_gradient(log_prob) - mb["log_prob"]
    rewards, discounts = fold_truncation(
        mb["reward"], next_values, mb["terminated"], mb["truncated"], hp.gamma
    )
    targets = vtrace(
        jax.lax.stop_gradient(values),
        next_values[-1],
        rewards,
        discounts,
        log_rhos,
        lambda_=hp.vtrace_lambda,
        clip_rho_threshold=hp.clip_rho_threshold,
        clip_pg_rho_threshold=hp.clip_pg_rho_threshold,
    )
    pg_loss = -jnp.mean(targets.pg_advantages * log_prob)
    value_loss = 0.5 * jnp.mean(jnp.square(targets.vs - values))
    entropy = jnp.mean(scored.entropy)
    total = pg_loss + hp.baseline_coef * value_loss - hp.ent_coef * entropy
    rhos = jnp.exp(log_rhos)
    # On-policy the recomputed log-probabilities differ from the actor's in the last
    # bits; the tolerance keeps that noise out of the clip fraction.
    clipped = rhos > hp.clip_rho_threshold * (1 + 1e-4)
    metrics = {
        "loss": total,
        "pg_loss": pg_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "rho_mean": jnp.mean(rhos),
        "rho_clip_frac": jnp.mean(clipped.astype(jnp.float32)),
        # KL(behaviour || current) estimated from the actions taken: mean(rho - 1 - log rho),
        # >= 0 per sample. How far the learner's policy has moved from the actor's.
        "behaviour_kl": jnp.mean(rhos - 1.0 - log_rhos),
    }
    return total, metrics
