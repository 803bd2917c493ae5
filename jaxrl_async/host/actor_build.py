"""What an actor is built from, in the run's process for an actor thread and in its own
for an actor process (`actor_process.py`): its envs, the agent whose `act` it runs, its
key and its env groups' policies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from jaxrl_async.agents import make_agent
from jaxrl_async.config.loader import Config
from jaxrl_async.errors import ConfigError
from jaxrl_async.host.actor import ActorPlan
from jaxrl_async.host.by_name import make_run_env
from jaxrl_async.host.groups import EnvGroups, Group, split_sizes
from jaxrl_async.host.policy import ActorPolicy
from jaxrl_async.types import Agent, BuildContext


def actor_env(config: Config, size: int):
    """One actor's `size` envs: one host env, or with pipeline.env_groups G > 1 an
    EnvGroups of G over consecutive slices (`groups.py`)."""
    count = min(config.pipeline.env_groups, size)
    if count == 1:
        return make_run_env(config.env, size)
    return EnvGroups(made(split_sizes(size, count), lambda part: make_run_env(config.env, part)))


def host_agent(config: Config, spec, axis_name: str | None = None) -> Agent:
    """The agent of `config.agent` for envs of `spec`, its collectives over `axis_name`
    (None: none); a one-line ConfigError for an agent or observation a host run cannot
    train."""
    ctx = BuildContext(
        spec, config.env.num_envs, config.pipeline.rollout_len, config.num_updates, axis_name
    )
    agent = make_agent(config.agent, ctx)
    if agent.data not in ("trajectory", "replay"):
        raise ConfigError(
            f"host env {config.env.name}: agent {config.agent.name} learns from neither "
            "trajectories nor a replay"
        )
    if config.env.normalize_obs and isinstance(spec.obs_shape, dict):
        raise ConfigError(
            f"env.normalize_obs=true needs an array observation; "
            f"{config.env.name} observes a dict ({', '.join(spec.obs_shape)})"
        )
    return agent


def actor_key(config: Config, seed: int) -> jax.Array:
    """The key an actor of the run of `seed` acts with (`policy.py` folds in its steps
    and envs)."""
    return jax.random.fold_in(jax.random.key(seed, impl=config.prng_impl), 1)


def actor_groups(agent: Agent, key: jax.Array, plan: ActorPlan, parts: list) -> list[Group]:
    """An actor's env groups, each with the policy compiled for its envs (their global
    indices from the actor's first on)."""
    groups, first = [], plan.first_env
    for env in parts:
        groups.append(Group(env, ActorPolicy(agent, key, first, env.num_envs, plan.num_envs)))
        first += env.num_envs
    return groups


def made(sizes: list[int], make: Callable[[int], Any]) -> list:
    """`make(size)` for each size in turn; should one fail, those made are closed."""
    built: list = []
    try:
        for size in sizes:
            built.append(make(size))
    except Exception:
        for env in built:
            env.close()
        raise
    return built
