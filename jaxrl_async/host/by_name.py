"""A host env by name: the one place that reads an `env.name`'s prefix and builds its
adapter (`gymnasium:<id>`, `envpool:<task>`), for training, evaluation, plans and benches
(a run's envs, env.mask_obs applied: `make_run_env`).

Every env built here resets within the step (same-step autoreset: Gymnasium's sync
vector env, EnvPool through its same-step shim), so every step is a transition. The
kwargs `vectorization_mode` (Gymnasium: sync by default, async or vector_entry_point) and
`autoreset_mode` (same_step only) may be given in env.kwargs like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium
from gymnasium.vector import AutoresetMode, VectorEnv

from jaxrl_async.config.loader import Config, with_overrides
from jaxrl_async.config.sections import EnvConfig
from jaxrl_async.envs import check_mask
from jaxrl_async.envs.suites import SUITES
from jaxrl_async.errors import ConfigError
from jaxrl_async.host.gymnasium_env import GymnasiumVecEnv, autoreset_mode_of, factory_name


def _same_step(name: str, kwargs: dict[str, Any]) -> str:
    """Take `autoreset_mode` out of `kwargs`: same_step, or a one-line ConfigError."""
    asked = kwargs.pop("autoreset_mode", "same_step")
    if autoreset_mode_of(asked) != AutoresetMode.SAME_STEP:
        raise ConfigError(
            f"env.kwargs.autoreset_mode={asked!r} of {name}: the actors train from envs "
            "that reset within the step (same_step); a next-step reset is no transition"
        )
    return "same_step"


def _gymnasium(name: str, num_envs: int, **kwargs: Any) -> GymnasiumVecEnv:
    from jaxrl_async.host.gymnasium_env import make_gymnasium

    mode = _same_step(name, kwargs)
    vectorization = kwargs.pop("vectorization_mode", "sync")
    return make_gymnasium(
        name, num_envs, vectorization_mode=vectorization, autoreset_mode=mode, **kwargs
    )


def _envpool(name: str, num_envs: int, **kwargs: Any) -> GymnasiumVecEnv:
    from jaxrl_async.host.envpool_env import make_envpool

    return make_envpool(name, num_envs, autoreset_mode=_same_step(name, kwargs), **kwargs)


# One adapter per prefix of sections.HOST_SUITES (the names EnvConfig.host takes).
MAKERS: dict[str, Callable[..., GymnasiumVecEnv]] = {
    "gymnasium": _gymnasium,
    "envpool": _envpool,
}
HOST_NAMES = "gymnasium:<id>, envpool:<task>"


def make_host_env(name: str, num_envs: int, **kwargs: Any) -> GymnasiumVecEnv:
    """`num_envs` copies of the host env `name` with `kwargs` (the config's env.kwargs),
    resetting within the step; a name of no host suite is a one-line ConfigError."""
    suite = name.partition(":")[0]
    if suite not in MAKERS:
        raise ConfigError(f"env.name={name!r} is not a host env ({HOST_NAMES})")
    return MAKERS[suite](name, num_envs, **kwargs)


def make_run_env(env_config: EnvConfig, num_envs: int) -> GymnasiumVecEnv:
    """`num_envs` envs of a run's `env` section (`make_host_env` of its name and kwargs),
    their observations masked by env.mask_obs as a JAX env's are (`envs.resolve`): an
    index the observation lacks, or a dict observation, is a one-line ConfigError."""
    env = make_host_env(env_config.name, num_envs, **env_config.kwargs)
    if env_config.mask_obs:
        try:
            check_mask(env_config, env.spec.obs_shape)
        except ConfigError:
            env.close()
            raise
        env.mask = tuple(env_config.mask_obs)
    return env


def host_config(config: Config, env: Any) -> Config | None:
    """The one place `train(config, env=...)` picks its engine: the config of a host run
    where `env` is a Gymnasium env's id (`"CartPole-v1"`, or a full host env name) or a
    factory of one (a function, lambda or `gymnasium.Env` class, called once per env with
    env.kwargs), its env.name naming it (`gymnasium.factory_name`); None for no env or a
    JAX env object (the pipeline's). A Gymnasium env instance is a one-line ConfigError:
    each actor thread steps envs of its own."""
    if env is None:
        return None
    if isinstance(env, str):
        prefix = env.partition(":")[0]
        if prefix in (*SUITES, "gymnax"):  # a JAX env's name: the config's, not env='s
            raise ConfigError(
                f"env={env!r} names a JAX env: set env.name={env} in the config "
                "(env= takes a JAX env object, or a Gymnasium id or factory)"
            )
        name = env if prefix in MAKERS else f"gymnasium:{env}"
    elif isinstance(env, (gymnasium.Env, VectorEnv)):
        kind = type(env).__name__
        raise ConfigError(
            f"env={kind} instance: pass a factory (env=lambda: {kind}(...)) or a Gymnasium "
            "id; each actor thread builds envs of its own"
        )
    elif (isinstance(env, type) and issubclass(env, gymnasium.Env)) or (
        callable(env) and not hasattr(env, "observation_space")
    ):
        name = factory_name(env)
    else:
        return None
    return with_overrides(config, [f"env.name={name}"])
