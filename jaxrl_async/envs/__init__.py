"""Environments: `make(name)` for every gymnax id, the spec check and the wrappers."""

from __future__ import annotations

import gymnax

from jaxrl_async.envs.spec import EnvSpec, check_env, spec_of
from jaxrl_async.envs.wrappers import EpisodeStatistics, NormalizeObservation, VecEnv
from jaxrl_async.errors import EnvSpecError, ConfigError


def registered_envs() -> list[str]:
    return list(gymnax.registered_envs)


def make(name: str, **kwargs):
    """(env, default_params) for a gymnax id; ConfigError for an unknown one."""
    if name not in gymnax.registered_envs:
        raise ConfigError(f"unknown env {name!r} (run `jaxrl-async envs` for the list)")
    return gymnax.make(name, **kwargs)


def make_batched(env, num_envs: int, normalize_obs: bool = False):
    """The batched env the pipeline steps: episode statistics, vmap, optional normalisation."""
    batched = VecEnv(EpisodeStatistics(env), num_envs)
    return NormalizeObservation(batched) if normalize_obs else batched


__all__ = ["EnvSpec", "EnvSpecError", "EpisodeStatistics", "NormalizeObservation", "VecEnv",
           "check_env", "make", "make_batched", "registered_envs", "spec_of"]
