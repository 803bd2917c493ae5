"""The DQN family as one Agent: double and dueling DQN, n-step, prioritized replay, Ape-X.

Variants are config switches, not files: `double` (Hasselt et al. 2016) takes the
argmax of the online network and the value of the target network; `dueling` (Wang et
al. 2016) splits the head; `n_step` sets the return length of what the pipeline stores
(offpolicy.py); `per_env_epsilon` gives env i of N the fixed ε_i = ε^(1 + α·i/(N−1)) of
Ape-X (Horgan et al. 2018) instead of the shared linear schedule.

A learner update draws one batch from the replay: the loss is the importance-weighted
Huber (or squared) TD error, and the new priorities are the |TD errors|. The target
network follows the online one every `target_update_every` updates, copied (tau=1) or
Polyak-averaged (tau<1).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from jaxrl_async.agents.base import Agent, BuildContext, ReplayUse, field_checks
from jaxrl_async.agents.common import flat_grad_step, make_optimizer
from jaxrl_async.errors import ConfigError
from jaxrl_async.networks import QNetwork

LOSSES = ("huber", "mse")


@dataclasses.dataclass(frozen=True)
class DQNConfig:
    DATA: ClassVar[str] = "replay"

    name: str = "dqn"
    learning_rate: float = 2.5e-4
    anneal_lr: bool = False
    adam_eps: float = 1e-5
    max_grad_norm: float = 10.0
    gamma: float = 0.99
    n_step: int = 1
    double: bool = True
    dueling: bool = False
    loss: str = "huber"
    huber_delta: float = 1.0
    # The target network moves every `target_update_every` learner updates by
    # target <- tau * online + (1 - tau) * target: tau 1 copies, tau 0.005 with every 1
    # is Polyak averaging.
    target_update_every: int = 50
    tau: float = 1.0
    # Linear epsilon schedule over env steps (all envs), or Ape-X's fixed per-env epsilons.
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    epsilon_decay_steps: int = 250_000
    per_env_epsilon: bool = False
    apex_epsilon: float = 0.4
    apex_alpha: float = 7.0
    updates_per_tick: int = 1
    hidden_sizes: tuple[int, ...] = (120, 84)
    activation: str = "relu"

    def __post_init__(self):
        need = field_checks(self)

        need(self.learning_rate > 0, "learning_rate", "> 0")
        need(self.adam_eps > 0, "adam_eps", "> 0")
        need(self.max_grad_norm > 0, "max_grad_norm", "> 0")
        need(0 <= self.gamma <= 1, "gamma", "in [0, 1]")
        need(self.n_step >= 1, "n_step", ">= 1")
        need(self.loss in LOSSES, "loss", f"one of {list(LOSSES)}")
        need(self.huber_delta > 0, "huber_delta", "> 0")
        need(self.target_update_every >= 1, "target_update_every", ">= 1")
        need(0 < self.tau <= 1, "tau", "in (0, 1]")
        for key in ("epsilon_start", "epsilon_end", "apex_epsilon"):
            need(0 <= getattr(self, key) <= 1, key, "in [0, 1]")
        need(self.epsilon_decay_steps >= 1, "epsilon_decay_steps", ">= 1")
        need(self.apex_alpha >= 0, "apex_alpha", ">= 0")
        need(self.updates_per_tick >= 1, "updates_per_tick", ">= 1")


@struct.dataclass
class DQNState:
    params: dict  # the online network: what the actor uses
    target_params: dict
    opt_state: optax.OptState  # over the online parameters as one flat vector
    steps: jax.Array  # int32 learner updates so far


def epsilons(config: DQNConfig, env_steps, env_index, num_envs: int):
    """The exploration rate of each env [B] at `env_steps` env steps."""
    if config.per_env_epsilon:
        spread = env_index.astype(jnp.float32) / max(num_envs - 1, 1)
        return config.apex_epsilon ** (1.0 + config.apex_alpha * spread)
    progress = jnp.minimum(env_steps.astype(jnp.float32) / config.epsilon_decay_steps, 1.0)
    epsilon = config.epsilon_start + progress * (config.epsilon_end - config.epsilon_start)
    return jnp.broadcast_to(epsilon, env_index.shape)


def td_targets(next_q_online, next_q_target, reward, discount, double: bool):
    """reward + discount · Q_target(x', a*) with a* the online argmax (double DQN) or the
    target argmax (DQN). next_q_* [b, A]; reward and discount [b] (n-step, offpolicy.py)."""
    chooser = next_q_online if double else next_q_target
    best = jnp.argmax(chooser, axis=-1)
    value = jnp.take_along_axis(next_q_target, best[:, None], axis=-1)[:, 0]
    return reward + discount * value


def make_dqn(config: DQNConfig, ctx: BuildContext) -> Agent:
    if not ctx.spec.discrete:
        raise ConfigError("agent.name=dqn needs a discrete action space; use sac for "
                          "continuous actions")
    net = QNetwork(ctx.spec.num_actions, config.hidden_sizes, config.activation, config.dueling)
    optimizer = make_optimizer("adam", config.learning_rate, config.anneal_lr,
                               max(1, ctx.num_updates * config.updates_per_tick),
                               config.max_grad_norm, config.adam_eps)
    action_dtype = ctx.spec.action_dtype

    def init(key):
        params = net.init(key, jnp.zeros((1, *ctx.spec.obs_shape), jnp.float32))
        return DQNState(params, params, optimizer.init(ravel_pytree(params)[0]), jnp.int32(0))

    def greedy(params, obs):
        return jnp.argmax(net.apply(params, obs), axis=-1).astype(action_dtype)

    def act(params, obs, keys, clock):
        best = greedy(params, obs)
        epsilon = epsilons(config, clock.env_steps, clock.env_index, clock.num_envs)

        def explore(key, eps):
            coin_key, action_key = jax.random.split(key)
            return (jax.random.uniform(coin_key) < eps,
                    jax.random.randint(action_key, (), 0, ctx.spec.num_actions))

        explores, random_action = jax.vmap(explore)(keys, epsilon)
        action = jnp.where(explores, random_action, best).astype(action_dtype)
        return action, {}

    def learn(state: DQNState, sample, key):
        del key  # the sample carries all randomness
        items = sample.items
        flat, unravel = ravel_pytree(state.params)
        # The bootstrap side needs no gradient: evaluated apart from the loss, the backward
        # pass covers only the b sampled observations (one call on obs and next_obs together
        # backpropagates through 2b rows, half of them zeros: 1.3x the time here).
        next_q_target = net.apply(state.target_params, items.next_obs)
        next_q_online = net.apply(state.params, items.next_obs) if config.double else None

        def loss_fn(flat, _):
            q = net.apply(unravel(flat), items.obs)
            q_taken = jnp.take_along_axis(q, items.action[:, None].astype(jnp.int32),
                                          axis=-1)[:, 0]
            target = jax.lax.stop_gradient(td_targets(
                next_q_online, next_q_target, items.reward, items.discount, config.double))
            td = target - q_taken
            if config.loss == "huber":
                per_item = optax.huber_loss(td, delta=config.huber_delta)
            else:
                per_item = 0.5 * jnp.square(td)
            loss = jnp.mean(sample.weights * per_item)
            metrics = {"loss": loss, "q_mean": jnp.mean(q_taken),
                       "td_abs_mean": jnp.mean(jnp.abs(td))}
            return loss, (metrics, jnp.abs(td))

        flat, opt_state, metrics, td_abs = flat_grad_step(
            loss_fn, optimizer, flat, state.opt_state, None, ctx.axis_name)
        params, steps = unravel(flat), state.steps + 1
        move = (steps % config.target_update_every) == 0
        target_params = jax.tree.map(
            lambda new, old: jnp.where(move, config.tau * new + (1 - config.tau) * old, old),
            params, state.target_params)
        return DQNState(params, target_params, opt_state, steps), metrics, td_abs

    return Agent(init=init, act=act, learn=learn, data="replay",
                 replay=ReplayUse(config.n_step, config.gamma, config.updates_per_tick),
                 greedy=greedy)
