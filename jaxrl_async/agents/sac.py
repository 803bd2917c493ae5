"""Soft Actor-Critic (Haarnoja et al. 2018, "SAC Algorithms and Applications"), as an Agent.

A tanh-squashed Gaussian policy, twin Q critics with Polyak-averaged target copies
(clipped double Q), and a temperature α tuned so that the policy's entropy tracks a
target (default -action_dim). Replay is uniform or prioritized: the critic loss is
weighted by the sample's importance weights and the new priorities are |TD errors|.

Actions: the policy acts in (-1, 1)^A, mapped affinely onto the env's bounds; the
critics and the log-probabilities (hence the entropy target) live in that (-1, 1)
space, so they do not depend on the env's units. Stored env actions are mapped back
before the critics see them.

One learner step is ONE gradient step of one Adam over one flat vector holding the
actor, the twin critics and log α. The loss is the sum of three parts, each of
which moves only its own parameters (the others enter it under stop_gradient):

  critic: Σ_i mean(w · (Q_i(x, a) - y)^2) / 2, y = r + d · (min_i Q'_i(x', a') - α log π(a'|x'))
          with a' ~ π(x') and Q' the target critics;
  actor:  mean(α log π(a|x) - min_i Q_i(x, a)), a ~ π(x), with the critics of this same
          step before its update (the loss is taken at one parameter point);
  alpha:  -mean(log α · (log π(a|x) + target_entropy)).

Since each parameter gets gradient from one part only, one Adam equals three Adams at
the same learning rate (unless max_grad_norm clips the joint norm).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
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
from jaxrl_async.config.agents import SACConfig, bind
from jaxrl_async.envs.spec import obs_zeros
from jaxrl_async.nn import distributions as D
from jaxrl_async.nn.networks import QEnsemble, SquashedGaussianPolicy
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


class SACState(struct.PyTreeNode):
    """The learner state. `params` is what the actor needs: the policy network's."""

    params: Params  # policy
    critic: Params  # the twin critics, stacked on a leading axis of NUM_CRITICS
    target_critic: Params  # their Polyak average
    log_alpha: jax.Array  # float32 [] log of the entropy temperature
    opt_state: optax.OptState  # over ravel_pytree({"actor", "critic", "log_alpha"})
    hparams: dict  # the SWEEPABLE fields as traced scalars (common.initial_hparams)


class SACParts(NamedTuple):
    """What SAC's functions hold fixed: the networks, the env's action box, the optimizer,
    the config (its target_entropy resolved) and the device axis (None: one device)."""

    actor: SquashedGaussianPolicy
    critic: QEnsemble
    box: ActionBox
    optimizer: Optimizer
    config: SACConfig
    axis_name: str | None


def make_sac(config: SACConfig, ctx: BuildContext) -> Agent:
    box = action_box(ctx.spec, "sac")
    if config.target_entropy is None:  # resolved here, so that the state holds a number
        config = dataclasses.replace(config, target_entropy=-float(box.dim))
    sac = SACParts(
        SquashedGaussianPolicy(box.dim, config.torso_spec()),
        make_critics(config),
        box,
        make_optimizer("adam", False, 1, config.adam_eps, clip=config.max_grad_norm > 0),
        config,
        ctx.axis_name,
    )

    def init(key: jax.Array) -> SACState:
        return sac_init(sac, ctx.spec, key)

    def act(params, carry, obs, episode_start, keys, clock) -> ActOutput:
        return ActOutput(carry, sac_act(sac, params, obs, keys), {})  # memoryless: carry None

    def greedy(params, carry, obs, episode_start) -> GreedyOutput:
        return GreedyOutput(carry, sac_greedy(sac, params, obs))

    def learn(state: SACState, sample: Sample, key: jax.Array) -> LearnOutput:
        return sac_learn(sac, state, sample, key)

    return Agent(
        init=init,
        act=act,
        learn=learn,
        data="replay",
        replay=ReplayUse(config.n_step, config.gamma, config.updates_per_tick),
        greedy=greedy,
    )


def trainable(state: SACState) -> dict:
    """What the one optimizer moves: the actor, the twin critics and log α."""
    return {"actor": state.params, "critic": state.critic, "log_alpha": state.log_alpha}


def sac_init(sac: SACParts, spec, key) -> SACState:
    actor_key, critic_key = jax.random.split(key)
    obs = obs_zeros(spec)
    critic_params = sac.critic.init(critic_key, obs, jnp.zeros((1, sac.box.dim), jnp.float32))
    state = SACState(
        params=sac.actor.init(actor_key, obs),
        critic=critic_params,
        target_critic=critic_params,
        log_alpha=jnp.float32(np.log(sac.config.init_alpha)),
        opt_state=None,
        hparams=initial_hparams(sac.config),
    )
    return state.replace(opt_state=sac.optimizer.init(ravel_pytree(trainable(state))[0]))


def sac_act(sac: SACParts, params, obs, keys) -> jax.Array:
    """A draw of the squashed Gaussian per env (`keys` [B]), on the env's bounds."""
    mean, log_std = sac.actor.apply(params, obs)
    return sac.box.to_env(jnp.tanh(D.gaussian_sample(keys, mean, log_std)))


def sac_greedy(sac: SACParts, params, obs) -> jax.Array:
    """The squashed mean (the deterministic policy SAC is usually evaluated with)."""
    return sac.box.to_env(jnp.tanh(sac.actor.apply(params, obs)[0]))


def policy_noise(obs_key, next_key, b: int, action_dim: int, axis_name: str | None):
    """Standard normal draws [2b, A], per sample from its global position (`sample_keys`):
    rows :b for the observations (`obs_key`), rows b: for the next ones (`next_key`)."""
    keys = jnp.concatenate(
        [sample_keys(obs_key, b, axis_name), sample_keys(next_key, b, axis_name)]
    )
    return standard_normal_rows(keys, action_dim)


def sac_learn(sac: SACParts, state: SACState, sample: Sample, key: jax.Array) -> LearnOutput:
    """sample: replay Sample of [b] NStepTransition items (this device's slice)."""
    hp = bind(sac.config, state.hparams)
    obs_key, next_key = jax.random.split(key)
    batch = replay_batch(sample, sac.box)
    b = sample.weights.shape[0]
    batch["noise"] = policy_noise(obs_key, next_key, b, sac.box.dim, sac.axis_name)
    flat, unravel = ravel_pytree(trainable(state))
    flat, opt_state, metrics, priorities = flat_grad_step(
        lambda f, mb: sac_loss(unravel(f), state.target_critic, mb, sac.actor, sac.critic, hp),
        StepRule(sac.optimizer, hp, sac.axis_name),
        flat,
        state.opt_state,
        batch,
    )
    p = unravel(flat)
    target_critic = optax.incremental_update(p["critic"], state.target_critic, hp.tau)
    state = SACState(
        params=p["actor"],
        critic=p["critic"],
        target_critic=target_critic,
        log_alpha=p["log_alpha"],
        opt_state=opt_state,
        hparams=state.hparams,
    )
    return LearnOutput(state, metrics, priorities)


def squashed_sample(noise, mean, log_std):
    """`distributions.squashed_gaussian_sample` with its standard normal draws given."""
    pre_tanh = mean + jnp.exp(log_std) * noise
    return jnp.tanh(pre_tanh), D.squashed_gaussian_log_prob(mean, log_std, pre_tanh)


def sac_loss(p, target_critic, batch, actor, critic, hp):
    """The summed critic, actor and temperature losses at parameters `p` (see the module
    docstring), with `hp`'s reward_scale and target_entropy (the config bound to the
    run's hyperparameters); returns (loss, (metrics, |TD| per sample averaged over the
    critics))."""
    obs, next_obs = batch["obs"], batch["next_obs"]
    b = batch["reward"].shape[0]
    alpha = jnp.exp(jax.lax.stop_gradient(p["log_alpha"]))
    # The policy on x' only feeds the targets: a forward pass of its own, outside the
    # gradient, so the backward pass covers the b rows of x alone. (One pass over x and
    # x' together would backpropagate zeros through the b rows of x' as well: the policy's
    # weight-gradient matmuls over 2b rows instead of b.)
    noise = batch["noise"]
    next_mean, next_log_std = actor.apply(jax.lax.stop_gradient(p["actor"]), next_obs)
    next_action, next_log_pi = jax.lax.stop_gradient(
        squashed_sample(noise[b:], next_mean, next_log_std)
    )
    mean, log_std = actor.apply(p["actor"], obs)
    action, log_pi = squashed_sample(noise[:b], mean, log_std)

    target = twin_min_target(
        critic, target_critic, batch, next_action, hp.reward_scale, bonus=alpha * next_log_pi
    )
    critic_loss, td, q = critic_td_loss(critic, p["critic"], batch, target)

    q_pi = critic.apply(jax.lax.stop_gradient(p["critic"]), obs, action)
    actor_loss = jnp.mean(alpha * log_pi - jnp.min(q_pi, axis=0))
    alpha_loss = -p["log_alpha"] * jax.lax.stop_gradient(jnp.mean(log_pi) + hp.target_entropy)

    loss = critic_loss + actor_loss + alpha_loss
    metrics = {
        "loss": loss,
        "critic_loss": critic_loss,
        "actor_loss": actor_loss,
        "alpha_loss": alpha_loss,
        "alpha": alpha,
        "entropy": -jnp.mean(log_pi),
        "q": jnp.mean(q),
        "target": jnp.mean(target),
        "td_abs": jnp.mean(jnp.abs(td)),
    }
    return loss, (metrics, td_priorities(td))
