"""Epsilon-greedy exploration over Q-values, shared by the value-based agents (DQN, R2D2,
PQN): one schedule, one random draw per env, the observation's action mask respected.

The schedule reads these config fields (DQNConfig, R2D2Config and PQNConfig all have
them): a linear `epsilon_start` -> `epsilon_end` over `epsilon_decay_steps` env steps of
all envs, or with `per_env_epsilon` Ape-X's fixed ε_i = `apex_epsilon`^(1 + `apex_alpha`
· i/(N−1)) for env i of N (Horgan et al. 2018).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxrl_async.nn.networks import action_mask
from jaxrl_async.types import ActFn, ActorClock, ActOutput, GreedyFn, GreedyOutput


def epsilons(config, env_steps, env_index, num_envs: int):
    """The exploration rate of each env [B] at `env_steps` env steps."""
    if config.per_env_epsilon:
        spread = env_index.astype(jnp.float32) / max(num_envs - 1, 1)
        return config.apex_epsilon ** (1.0 + config.apex_alpha * spread)
    progress = jnp.minimum(env_steps.astype(jnp.float32) / config.epsilon_decay_steps, 1.0)
    epsilon = config.epsilon_start + progress * (config.epsilon_end - config.epsilon_start)
    return jnp.broadcast_to(epsilon, env_index.shape)


def legal_actions(obs, num_actions: int):
    """[B, A] bool: the observation's action mask, else every action."""
    mask = action_mask(obs)
    batch = jax.tree.leaves(obs)[0].shape[0]
    return jnp.ones((batch, num_actions), bool) if mask is None else mask


def epsilon_greedy(keys, best, epsilon, legal):
    """Per env: with probability epsilon [B] a uniformly random legal action, else `best`."""

    def explore(key, eps, legal):
        coin_key, action_key = jax.random.split(key)
        return (
            jax.random.uniform(coin_key) < eps,
            jax.random.categorical(action_key, jnp.where(legal, 0.0, -jnp.inf)),
        )

    explores, random_action = jax.vmap(explore)(keys, epsilon, legal)
    return jnp.where(explores, random_action, best)


def epsilon_greedy_actor(
    config, q_values: Callable, num_actions: int, action_dtype, record_epsilon: bool = False
) -> tuple[ActFn, GreedyFn]:
    """(act, greedy) of a memoryless agent whose Q-network is `q_values(params, obs)` ->
    [B, A] (illegal actions already at -1e9, `networks.QNetwork`): greedy is the argmax,
    act (`Agent.act`) explores around it at the schedule's epsilon for the actor's clock.
    With `record_epsilon` the trajectory's extras carry each env's epsilon ("epsilon").
    Both pass the carry (None) through."""

    def best(params, obs):
        return jnp.argmax(q_values(params, obs), axis=-1).astype(action_dtype)

    def greedy(params, carry, obs, episode_start) -> GreedyOutput:
        return GreedyOutput(carry, best(params, obs))

    def act(params, carry, obs, episode_start, keys, clock: ActorClock) -> ActOutput:
        epsilon = epsilons(config, clock.env_steps, clock.env_index, clock.num_envs)
        action = epsilon_greedy(keys, best(params, obs), epsilon, legal_actions(obs, num_actions))
        extras = {"epsilon": epsilon} if record_epsilon else {}
        return ActOutput(carry, action.astype(action_dtype), extras)

    return act, greedy
