"""Twin Delayed DDPG (Fujimoto et al. 2018, "Addressing Function Approximation Error in
Actor-Critic Methods"), as an Agent.

A deterministic tanh actor μ(x) in (-1, 1)^A and twin critics, each with a Polyak-averaged
target copy, on the replay path: uniform or prioritized, the critic loss weighted by the
sample's importance weights and the new priorities the |TD errors| (as SAC's; the action
box, the critics, their target and loss are `agents/continuous.py`, shared with SAC).
Every learner update is one critic update:

  critic:  Σ_i mean(w · (Q_i(x, a) - y)^2) / 2,  y = r + d · min_i Q'_i(x', a'),
           a' = clip(μ'(x') + clip(σ̃ ε, -c, c), -1, 1),  ε ~ N(0, I)
           (clipped double Q, and target policy smoothing: σ̃ = policy_noise,
           c = noise_clip; μ' and Q' the targets);

and every `policy_delay`-th one (the state counts them), after it, the delayed part:

  actor:   -mean(Q_1(x, μ(x))), with the critics just updated (the authors' order);
  targets: μ' ← τ μ + (1 - τ) μ',  Q' ← τ Q + (1 - τ) Q'.

Acting adds exploration noise, clip(μ(x) + σ ε, -1, 1) with σ = exploration_noise;
greedy evaluation is μ(x). All noise scales are in the (-1, 1) space, whatever the
env's bounds (the paper's σ = 0.1 · max_action is σ = 0.1 there).

Optimizers: two Adams with states of their own, one over the critics' parameters as a
flat vector, one over the actor's. The delayed part runs under `lax.cond`, so between
actor updates the actor's Adam state (its moments and step count) is not touched at
all: the actor's optimizer is exactly an Adam that saw only the actor's own steps. One
Adam over both, fed zero actor gradients in between, would decay the actor's moments
and advance its bias correction on every critic update instead. Under
`train.num_seeds` the cond's predicate is batched and XLA runs both branches and
selects, with the same result.
"""

from __future__ import annotations

from typing import NamedTuple, cast

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from jaxrl_async.agents.common import (
    Optimizer,
    StepRule,
    flat_grad_step,
    initial_hparams,
    make_optimizer,
)
from jaxrl_async.agents.continuous import (
    ActionBox,
    action_box,
    critic_td_loss,
    make_critics,
    replay_batch,
    sample_keys,
    standard_normal_rows,
    td_priorities,
    twin_min_target,
)
from jaxrl_async.config.agents import TD3Config, bind
from jaxrl_async.envs.spec import obs_zeros
from jaxrl_async.nn.networks import DeterministicPolicy, QEnsemble, QValue, ensemble_member
from jaxrl_async.types import (
    ActOutput,
    Agent,
    BuildContext,
    GreedyOutput,
    LearnOutput,
    Params,
    ReplayUse,
    Sample,
)


class TD3State(struct.PyTreeNode):
    """The learner state. `params` is what the actor needs: the policy network's."""

    params: Params  # the actor μ
    target_params: Params  # μ', its Polyak average
    critic: Params  # the twin critics, stacked on a leading axis of NUM_CRITICS
    target_critic: Params  # their Polyak average
    actor_opt_state: optax.OptState  # over ravel_pytree(params)
    critic_opt_state: optax.OptState  # over ravel_pytree(critic)
    steps: jax.Array  # int32 learner (critic) updates so far
    # The last actor update's loss and gradient norm, reported by the updates in between.
    actor_metrics: dict
    hparams: dict  # the SWEEPABLE fields as traced scalars (common.initial_hparams)


def smoothed_target_action(target_action, noise, policy_noise, noise_clip):
    """Target policy smoothing: clip(μ'(x') + clip(policy_noise · ε, ±noise_clip), ±1),
    with ε = `noise` standard normal [b, A] and μ'(x') = `target_action` in (-1, 1)^A."""
    smoothing = jnp.clip(policy_noise * noise, -noise_clip, noise_clip)
    return jnp.clip(target_action + smoothing, -1.0, 1.0)


class TD3Nets(NamedTuple):
    """TD3's networks and the env's action box."""

    actor: DeterministicPolicy
    critic: QEnsemble
    first_critic: QValue  # member 0 of `critic`, for the actor loss
    box: ActionBox


def critic_update(nets: TD3Nets, rule: StepRule, state: TD3State, batch: dict, noise):
    """The twin critics' Adam step on the clipped double-Q target, the target action
    smoothed with `noise` [b, A] standard normal: (state, metrics, priorities [b])."""
    hp = rule.hp
    next_action = smoothed_target_action(
        nets.actor.apply(state.target_params, batch["next_obs"]),
        noise,
        hp.policy_noise,
        hp.noise_clip,
    )
    target = twin_min_target(nets.critic, state.target_critic, batch, next_action, hp.reward_scale)
    flat, unravel = ravel_pytree(state.critic)

    def critic_loss(flat, batch):
        loss, td, q = critic_td_loss(nets.critic, unravel(flat), batch, target)
        metrics = {
            "critic_loss": loss,
            "q": jnp.mean(q),
            "target": jnp.mean(target),
            "td_abs": jnp.mean(jnp.abs(td)),
        }
        return loss, (metrics, td_priorities(td))

    flat, opt_state, metrics, priorities = flat_grad_step(
        critic_loss, rule, flat, state.critic_opt_state, batch
    )
    state = state.replace(critic=unravel(flat), critic_opt_state=opt_state, steps=state.steps + 1)
    return state, metrics, priorities


def delayed_update(nets: TD3Nets, rule: StepRule, state: TD3State, obs) -> TD3State:
    """The actor's Adam step on -mean Q_1(x, μ(x)), then both targets' Polyak step."""
    q1 = ensemble_member(state.critic, 0)
    flat, unravel = ravel_pytree(state.params)

    def actor_loss(flat, obs):
        q = cast(jax.Array, nets.first_critic.apply(q1, obs, nets.actor.apply(unravel(flat), obs)))
        loss = -jnp.mean(q)
        return loss, {"actor_loss": loss}

    flat, opt_state, metrics, _ = flat_grad_step(actor_loss, rule, flat, state.actor_opt_state, obs)
    params, tau = unravel(flat), rule.hp.tau
    return state.replace(
        params=params,
        actor_opt_state=opt_state,
        target_params=optax.incremental_update(params, state.target_params, tau),
        target_critic=optax.incremental_update(state.critic, state.target_critic, tau),
        actor_metrics={
            "actor_loss": metrics["actor_loss"],
            "actor_grad_norm": metrics["grad_norm"],
        },
    )


def td3_init(nets: TD3Nets, optimizer: Optimizer, config: TD3Config, spec, key) -> TD3State:
    actor_key, critic_key = jax.random.split(key)
    obs = obs_zeros(spec)
    params = nets.actor.init(actor_key, obs)
    critic_params = nets.critic.init(critic_key, obs, jnp.zeros((1, nets.box.dim), jnp.float32))
    return TD3State(
        params=params,
        target_params=params,
        critic=critic_params,
        target_critic=critic_params,
        actor_opt_state=optimizer.init(ravel_pytree(params)[0]),
        critic_opt_state=optimizer.init(ravel_pytree(critic_params)[0]),
        steps=jnp.int32(0),
        actor_metrics={"actor_loss": jnp.float32(0.0), "actor_grad_norm": jnp.float32(0.0)},
        hparams=initial_hparams(config),
    )


def td3_action(nets: TD3Nets, exploration_noise: float, params, obs, keys) -> jax.Array:
    """clip(μ(x) + σ ε, -1, 1) on the env's bounds, σ = `exploration_noise`."""
    noise = jax.vmap(lambda k: jax.random.normal(k, (nets.box.dim,), jnp.float32))(keys)
    action = cast(jax.Array, nets.actor.apply(params, obs)) + exploration_noise * noise
    return nets.box.to_env(jnp.clip(action, -1.0, 1.0))


def td3_greedy(nets: TD3Nets, params, obs) -> jax.Array:
    """The noiseless action μ(x)."""
    return nets.box.to_env(nets.actor.apply(params, obs))


def make_td3(config: TD3Config, ctx: BuildContext) -> Agent:
    box = action_box(ctx.spec, "td3")
    nets = TD3Nets(
        DeterministicPolicy(box.dim, config.torso_spec()),
        make_critics(config),
        QValue(config.torso_spec()),
        box,
    )
    optimizer = make_optimizer("adam", False, 1, config.adam_eps, clip=config.max_grad_norm > 0)

    def learn(state: TD3State, sample: Sample, key: jax.Array) -> LearnOutput:
        """sample: replay Sample of [b] NStepTransition items (this device's slice); `key`
        draws the target smoothing noise, per sample from its global position."""
        rule = StepRule(optimizer, bind(config, state.hparams), ctx.axis_name)
        batch = replay_batch(sample, box)
        noise = standard_normal_rows(
            sample_keys(key, sample.weights.shape[0], ctx.axis_name), box.dim
        )
        state, metrics, priorities = critic_update(nets, rule, state, batch, noise)
        state = jax.lax.cond(
            state.steps % config.policy_delay == 0,
            lambda s: delayed_update(nets, rule, s, batch["obs"]),
            lambda s: s,
            state,
        )
        metrics["critic_grad_norm"] = metrics.pop("grad_norm")
        return LearnOutput(state, {**metrics, **state.actor_metrics}, priorities)

    def init(key: jax.Array) -> TD3State:
        return td3_init(nets, optimizer, config, ctx.spec, key)

    def act(params, carry, obs, episode_start, keys, clock) -> ActOutput:
        action = td3_action(nets, config.exploration_noise, params, obs, keys)
        return ActOutput(carry, action, {})  # memoryless: the carry (None) passes through

    def greedy(params, carry, obs, episode_start) -> GreedyOutput:
        return GreedyOutput(carry, td3_greedy(nets, params, obs))

    return Agent(
        init=init,
        act=act,
        learn=learn,
        data="replay",
        replay=ReplayUse(config.n_step, config.gamma, config.updates_per_tick),
        greedy=greedy,
    )
