"""The DQN family as one Agent: double and dueling DQN, n-step, prioritized replay, Ape-X.

Variants are config switches, not files: `double` (Hasselt et al. 2016) takes the
argmax of the online network and the value of the target network; `dueling` (Wang et
al. 2016) splits the head; `n_step` sets the return length of what the pipeline stores
(replay/stage.py); `per_env_epsilon` gives env i of N the fixed ε_i = ε^(1 + α·i/(N−1)) of
Ape-X (Horgan et al. 2018) instead of the shared linear schedule.

A learner update draws one batch from the replay: the loss is the importance-weighted
Huber (or squared) TD error, and the new priorities are the |TD errors|. The target
network follows the online one every `target_update_every` updates, copied (tau=1) or
Polyak-averaged (tau<1). The actor is epsilon-greedy (`exploration.py`, shared with R2D2
and PQN).
"""

from __future__ import annotations

from typing import cast

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from jaxrl_async.agents.common import StepRule, flat_grad_step, initial_hparams, make_optimizer
from jaxrl_async.agents.exploration import epsilon_greedy_actor
from jaxrl_async.config.agents import DQNConfig, bind
from jaxrl_async.envs.spec import obs_zeros
from jaxrl_async.errors import ConfigError
from jaxrl_async.nn.networks import QNetwork
from jaxrl_async.types import Agent, BuildContext, LearnOutput, Params, ReplayUse, Sample


class DQNState(struct.PyTreeNode):
    params: Params  # the online network: what the actor uses
    target_params: Params
    opt_state: optax.OptState  # over the online parameters as one flat vector
    steps: jax.Array  # int32 learner updates so far
    hparams: dict  # the SWEEPABLE fields as traced scalars (common.initial_hparams)


def td_targets(next_q_online, next_q_target, reward, discount, double: bool):
    """reward + discount · Q_target(x', a*) with a* the online argmax (double DQN) or the
    target argmax (DQN). next_q_* [b, A]; reward and discount [b] (n-step, replay/stage.py)."""
    chooser = next_q_online if double else next_q_target
    best = jnp.argmax(chooser, axis=-1)
    value = jnp.take_along_axis(next_q_target, best[:, None], axis=-1)[:, 0]
    return reward + discount * value


def move_target(config, params, target_params, steps):
    """The target network after learner update `steps`: every `target_update_every` updates
    target <- tau · online + (1 - tau) · target."""
    move = (steps % config.target_update_every) == 0
    return jax.tree.map(
        lambda new, old: jnp.where(move, config.tau * new + (1 - config.tau) * old, old),
        params,
        target_params,
    )


def make_dqn(config: DQNConfig, ctx: BuildContext) -> Agent:
    if not ctx.spec.discrete:
        raise ConfigError(
            "agent.name=dqn needs a discrete action space; use sac for continuous actions"
        )
    net = QNetwork(ctx.spec.num_actions, config.torso_spec(), config.dueling)
    optimizer = make_optimizer(
        "adam", config.anneal_lr, max(1, ctx.num_updates * config.updates_per_tick), config.adam_eps
    )
    act, greedy = epsilon_greedy_actor(
        config, net.apply, ctx.spec.num_actions, ctx.spec.action_dtype
    )

    def init(key):
        params = net.init(key, obs_zeros(ctx.spec))
        return DQNState(
            params,
            params,
            optimizer.init(ravel_pytree(params)[0]),
            jnp.int32(0),
            initial_hparams(config),
        )

    def learn(state: DQNState, sample: Sample, key: jax.Array) -> LearnOutput:
        del key  # the sample carries all randomness
        hp = bind(config, state.hparams)
        flat, unravel = ravel_pytree(state.params)
        # The bootstrap side needs no gradient: evaluated apart from the loss, the backward
        # pass covers only the b sampled observations (one call on obs and next_obs together
        # would backpropagate through 2b rows, half of them zeros).
        next_q_target = net.apply(state.target_params, sample.items.next_obs)
        next_q_online = net.apply(state.params, sample.items.next_obs) if config.double else None
        flat, opt_state, metrics, td_abs = flat_grad_step(
            lambda f, _: dqn_loss(net, hp, unravel(f), sample, (next_q_online, next_q_target)),
            StepRule(optimizer, hp, ctx.axis_name),
            flat,
            state.opt_state,
        )
        params, steps = unravel(flat), state.steps + 1
        target_params = move_target(hp, params, state.target_params, steps)
        return LearnOutput(
            DQNState(params, target_params, opt_state, steps, state.hparams), metrics, td_abs
        )

    return Agent(
        init=init,
        act=act,
        learn=learn,
        data="replay",
        replay=ReplayUse(config.n_step, config.gamma, config.updates_per_tick),
        greedy=greedy,
    )


def dqn_loss(net: QNetwork, hp, params, sample, next_q):
    """The importance-weighted Huber (or squared) TD error of the sampled items:
    (loss, (metrics, |TD| [b])). `hp`: the config bound to the run's hyperparameters;
    next_q: (Q_online(x') [b, A] or None without double Q, Q_target(x') [b, A]), computed
    outside the gradient."""
    items = sample.items
    next_q_online, next_q_target = next_q
    q = cast(jax.Array, net.apply(params, items.obs))
    q_taken = jnp.take_along_axis(q, items.action[:, None].astype(jnp.int32), axis=-1)[:, 0]
    target = jax.lax.stop_gradient(
        td_targets(next_q_online, next_q_target, items.reward, items.discount, hp.double)
    )
    td = target - q_taken
    if hp.loss == "huber":
        per_item = optax.huber_loss(td, delta=hp.huber_delta)
    else:
        per_item = 0.5 * jnp.square(td)
    loss = jnp.mean(sample.weights * per_item)
    metrics = {
        "loss": loss,
        "q_mean": jnp.mean(q_taken),
        "td_abs_mean": jnp.mean(jnp.abs(td)),
    }
    return loss, (metrics, jnp.abs(td))
