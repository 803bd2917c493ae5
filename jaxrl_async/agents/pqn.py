"""PQN (Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning"), as an Agent.

Q-learning without a replay buffer or a target network, made stable by LayerNorm in the
Q-network and by the decorrelated data of many parallel envs. It learns from the
pipeline's trajectories, as PPO does:

- the network: the shared torso (MLP, or convs then MLP on image observations) with a
  LayerNorm between every hidden layer and its activation (`agent.layer_norm`), then a
  linear Q head; illegal actions (an `action_mask` observation) get -1e9, so neither the
  greedy action nor a target's max picks them;
- the actor: epsilon-greedy on the argmax, with DQN's schedules (`exploration.py`);
  greedy evaluation takes the argmax;
- the learner, once per rollout: the Q-network with the learner's current parameters
  scores x'_t, the observation after every step t (before any auto-reset), and Peng's
  Q(λ) returns (`returns.q_lambda`) run backwards over the rollout from max_a Q(x'_t, a):
  an episode end cuts the trace, a termination does not bootstrap, a truncation
  bootstraps from its final observation (`fold_truncation`), the rollout's last step from
  max_a Q of the next one. Then `num_epochs` passes of `num_minibatches` minibatches
  (each an equal share of every env's steps) regress Q(x_t, a_t) on those returns (half
  the squared error).

The targets are computed once per rollout, before the first gradient step, and held for
all its epochs, as in the paper: they then play the part a target network plays in DQN,
a regression target that does not move under the step it feeds, for the rollout's
`num_epochs · num_minibatches` steps (recomputing them every epoch would chase the
network being fitted, and cost one more forward pass over the rollout per epoch). The
learner state holds the online parameters only; nothing lags behind them but the targets
of the rollout in hand.

Staleness (`pipeline.lag` L >= 1). The actor acted epsilon-greedily with parameters L
updates older than the learner's; its epsilon follows the env-step clock, not the
parameters' age. The learner recomputes every max_a Q(x'_t, a) with its current
parameters, so the one-step part of each target is exact Q-learning, off-policy whatever
acted. The λ-weighted part sums the rewards the behaviour earned along the rollout,
without importance weights and without cutting the trace where the behaviour (stale, and
exploring) departs from the current greedy policy: the share of a target that follows
the behaviour's actions for k steps or more is λ^k, and Peng's Q(λ) is biased towards
the behaviour's values by that much. A stale behaviour adds to the exploration's share of
that bias rather than bringing a new kind; λ = 0 removes it. docs/performance.md has
the lag study (PQN on CartPole at lags 0-2).
"""

from __future__ import annotations

import functools
from typing import cast

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl_async.agents.common import (
    StepRule,
    env_minibatches,
    fold_truncation,
    init_opt_state,
    initial_hparams,
    make_optimizer,
    sgd,
)
from jaxrl_async.agents.exploration import epsilon_greedy_actor
from jaxrl_async.agents.returns import q_lambda
from jaxrl_async.config.agents import PQNConfig, bind
from jaxrl_async.envs.spec import obs_zeros
from jaxrl_async.errors import ConfigError
from jaxrl_async.nn.networks import QNetwork
from jaxrl_async.types import Agent, BuildContext, LearnOutput, Params, Transition


class PQNState(struct.PyTreeNode):
    """The learner state: one network, no target copy of it."""

    params: Params  # the Q-network's: what the actor acts with and the targets come from
    opt_state: optax.OptState  # over the parameters as one flat vector (`common.sgd`)
    hparams: dict  # the SWEEPABLE fields as traced scalars (common.initial_hparams)


def make_pqn(config: PQNConfig, ctx: BuildContext) -> Agent:
    if not ctx.spec.discrete:
        raise ConfigError(
            "agent.name=pqn needs a discrete action space; use sac or ppo for continuous actions"
        )
    torso = config.torso_spec()._replace(layer_norm=config.layer_norm)
    net = QNetwork(ctx.spec.num_actions, torso)
    num_grad_steps = ctx.num_updates * config.num_epochs * config.num_minibatches
    optimizer = make_optimizer("adam", config.anneal_lr, num_grad_steps, config.adam_eps)
    act, greedy = epsilon_greedy_actor(
        config, net.apply, ctx.spec.num_actions, ctx.spec.action_dtype, record_epsilon=True
    )
    targets = functools.partial(pqn_targets, net, config)

    def init(key):
        params = net.init(key, obs_zeros(ctx.spec))
        return PQNState(params, init_opt_state(optimizer, params), initial_hparams(config))

    def learn(state: PQNState, traj: Transition, key: jax.Array) -> LearnOutput:
        """traj: Transition pytree, time-major [T, B, ...]."""
        data = targets(state, traj)
        hp = bind(config, state.hparams)
        params, opt_state, metrics = sgd(
            functools.partial(pqn_loss, net),
            StepRule(optimizer, hp, ctx.axis_name),
            state.params,
            state.opt_state,
            jax.random.split(key, config.num_epochs),
            lambda epoch_key: env_minibatches(
                epoch_key, data, config.num_minibatches, ctx.axis_name
            ),
        )
        epsilon = jnp.mean(traj.extras["epsilon"])  # the actor's, over its envs
        if ctx.axis_name is not None:
            epsilon = jax.lax.pmean(epsilon, ctx.axis_name)
        return LearnOutput(
            PQNState(params, opt_state, state.hparams), {**metrics, "epsilon": epsilon}
        )

    return Agent(init=init, act=act, learn=learn, data="trajectory", greedy=greedy, targets=targets)


def max_q(net: QNetwork, params, obs):
    """max_a Q(obs, a) [T, B] of a trajectory's observations [T, B, ...]."""
    T, B = jax.tree.leaves(obs)[0].shape[:2]
    flat = jax.tree.map(lambda x: x.reshape(T * B, *x.shape[2:]), obs)
    return jnp.max(cast(jax.Array, net.apply(params, flat)), axis=-1).reshape(T, B)


def pqn_targets(net: QNetwork, config: PQNConfig, state: PQNState, traj):
    """The learner's batch: the trajectory's observations and actions [T, B, ...] with
    their Q(λ) returns from the current parameters, before the first gradient step."""
    hp = bind(config, state.hparams)
    next_values = max_q(net, state.params, traj.next_obs)
    rewards, discounts = fold_truncation(
        hp.reward_scale * traj.reward.astype(jnp.float32),
        next_values,
        traj.terminated,
        traj.truncated,
        hp.gamma,
    )
    returns = q_lambda(next_values, rewards, discounts, hp.q_lambda)
    return {"obs": traj.obs, "action": traj.action, "target": returns}


def pqn_loss(net: QNetwork, params, mb):
    """Half the squared error of Q(x_t, a_t) against the minibatch's held Q(λ) returns:
    (loss, metrics)."""
    q = cast(jax.Array, net.apply(params, mb["obs"]))
    q_taken = jnp.take_along_axis(q, mb["action"][:, None].astype(jnp.int32), axis=-1)[:, 0]
    td = mb["target"] - q_taken
    loss = 0.5 * jnp.mean(jnp.square(td))
    return loss, {
        "loss": loss,
        "q_mean": jnp.mean(q_taken),
        "target_mean": jnp.mean(mb["target"]),
        "td_abs_mean": jnp.mean(jnp.abs(td)),
    }
