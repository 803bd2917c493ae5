"""Proximal Policy Optimization (Schulman et al. 2017) with GAE, as an Agent.

The actor acts with the policy network alone; the learner evaluates the critic
on the whole trajectory in one batched call. Truncated episodes bootstrap from
V(final observation) by folding γ·V into the reward of the truncating step and
cutting the trace there, so `gae` itself only sees terminations.

With `agent.memory` the network is recurrent (`actor_critic.py`): minibatches are
then groups of whole envs [T, b] instead of shuffled steps, and the loss re-runs the
cell over each env's rollout from the carry the actor stored for its first step.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxrl_async.agents.actor_critic import ActorCritic, make_actor_critic
from jaxrl_async.agents.common import (
    ActorCriticState,
    StepRule,
    env_group_minibatches,
    env_minibatches,
    fold_truncation,
    init_opt_state,
    initial_hparams,
    make_optimizer,
    sgd,
    standardize_minibatches,
)
from jaxrl_async.agents.returns import gae
from jaxrl_async.config.agents import PPOConfig, bind
from jaxrl_async.types import Agent, BuildContext, LearnOutput, Transition


def make_ppo(config: PPOConfig, ctx: BuildContext) -> Agent:
    net = make_actor_critic(
        ctx.spec, config.torso_spec(), "ppo", config.memory_spec(), config.shared_torso
    )
    num_grad_steps = ctx.num_updates * config.num_epochs * config.num_minibatches
    optimizer = make_optimizer("adam", config.anneal_lr, num_grad_steps, config.adam_eps)
    targets = functools.partial(ppo_targets, net, config)

    def init(key):
        params = net.init(key)
        return ActorCriticState(params, init_opt_state(optimizer, params), initial_hparams(config))

    def learn(state: ActorCriticState, traj: Transition, key: jax.Array) -> LearnOutput:
        """traj: Transition pytree, time-major [T, B, ...]."""
        data = targets(state, traj)
        hp = bind(config, state.hparams)
        params, opt_state, metrics = sgd(
            lambda p, mb: ppo_loss(net, p, mb, hp),
            StepRule(optimizer, hp, ctx.axis_name),
            state.params,
            state.opt_state,
            jax.random.split(key, config.num_epochs),
            ppo_minibatches(net, config, ctx.axis_name, data),
        )
        return LearnOutput(ActorCriticState(params, opt_state, state.hparams), metrics)

    return Agent(
        init=init,
        act=net.act,
        learn=learn,
        data="trajectory",
        greedy=net.greedy,
        init_carry=net.init_carry,
        targets=targets,
    )


def ppo_minibatches(net: ActorCritic, config: PPOConfig, axis_name: str | None, data):
    """epoch_key -> the epoch's minibatches of `data` [T, B, ...], stacked [M, ...]."""

    def split(key):
        if net.recurrent:  # whole sequences: the cell runs through each env's rollout
            mbs = env_group_minibatches(key, data, config.num_minibatches)
        else:
            mbs = env_minibatches(key, data, config.num_minibatches, axis_name)
        if config.normalize_advantages:  # over each whole minibatch, on every device
            mbs["advantage"] = standardize_minibatches(mbs["advantage"], axis_name)
        return mbs

    return split


def ppo_targets(net: ActorCritic, config: PPOConfig, state: ActorCriticState, traj):
    """The learner's batch: the trajectory [T, B, ...] with the critic's values, GAE
    advantages and value targets, all before the first gradient step."""
    hp = bind(config, state.hparams)
    values, next_values = net.values(state.params, traj)
    # A truncating step bootstraps from V(final observation): folded into its reward,
    # with the trace cut there, so that `gae` sees only terminations.
    rewards, discounts = fold_truncation(
        hp.reward_scale * traj.reward.astype(jnp.float32),
        next_values,
        traj.terminated,
        traj.truncated,
        hp.gamma,
    )
    advantages = gae(values, next_values[-1], rewards, discounts, hp.gae_lambda)
    return {
        "obs": traj.obs,
        "action": net.scored_action(traj),
        "log_prob": traj.extras["log_prob"],
        "advantage": advantages,
        "target": advantages + values,
        "value": values,
        **net.sequence_inputs(traj),
    }


def ppo_loss(net, params, mb, hp):
    """The clipped surrogate, value and entropy losses of a minibatch; `hp` the config
    bound to the run's hyperparameters (`configs.bind`). Returns (loss, metrics)."""
    scored = net.evaluate(params, mb)
    log_ratio = scored.log_prob - mb["log_prob"]
    ratio = jnp.exp(log_ratio)
    adv = mb["advantage"]  # standardised per minibatch already (`minibatches`)
    clipped = jnp.clip(ratio, 1 - hp.clip_eps, 1 + hp.clip_eps)
    pg_loss = -jnp.mean(jnp.minimum(ratio * adv, clipped * adv))
    value = scored.value
    value_err = jnp.square(value - mb["target"])
    if hp.clip_value:
        value_clipped = mb["value"] + jnp.clip(value - mb["value"], -hp.clip_eps, hp.clip_eps)
        value_err = jnp.maximum(value_err, jnp.square(value_clipped - mb["target"]))
    value_loss = 0.5 * jnp.mean(value_err)
    entropy = jnp.mean(scored.entropy)
    total = pg_loss + hp.vf_coef * value_loss - hp.ent_coef * entropy
    metrics = {
        "loss": total,
        "pg_loss": pg_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "approx_kl": jnp.mean((ratio - 1) - log_ratio),
        "clip_frac": jnp.mean((jnp.abs(ratio - 1) > hp.clip_eps).astype(jnp.float32)),
    }
    return total, metrics
