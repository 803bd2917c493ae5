"""Environments: `make(name)` for every gymnax id, the spec check and the wrappers.

gymnax is imported lazily: it pulls in scipy and seaborn (about 2 s), which a CLI
call that fails on its config should not pay for.
"""

from __future__ import annotations

import jax
import numpy as np

from jaxrl_async.envs import fixes
from jaxrl_async.envs.spec import EnvSpec, check_env, spec_of
from jaxrl_async.envs.wrappers import (
    CastObservation,
    EpisodeStatistics,
    NormalizeObservation,
    VecEnv,
)
from jaxrl_async.errors import ConfigError, EnvSpecError, UserError


def registered_envs() -> list[str]:
    import gymnax

    return list(gymnax.registered_envs)


def make(name: str, **kwargs):
    """(env, default_params) for a gymnax id; ConfigError for an unknown one.

    A few gymnax envs emit observations of another dtype than their space declares
    (Catch-bsuite, FourRooms-misc); those are cast to the declared dtype so they pass
    `check_env` like any other. Asterix-MinAtar gets a loop-free slot sampler so it
    traces inside shard_map (`fixes.py`).
    """
    import gymnax

    if name not in gymnax.registered_envs:
        raise ConfigError(f"unknown env {name!r} (run `jaxrl-async envs` for the list)")
    fixes.apply(name)
    try:
        env, params = gymnax.make(name, **kwargs)
    except Exception as e:  # e.g. MNISTBandit downloads MNIST in its constructor
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise UserError(f"cannot build env {name!r}: {type(e).__name__}: {first}") from None
    declared = np.dtype(env.observation_space(params).dtype)
    obs, _ = jax.eval_shape(env.reset, jax.random.key(0), params)
    if np.dtype(obs.dtype) != declared:
        env = CastObservation(env, declared)
    return env, params


def make_batched(env, normalize_obs: bool = False, axis_name: str | None = None):
    """The batched env the pipeline steps: episode statistics, vmap, optional normalisation.

    `axis_name`: the mesh axis the batch is sharded over, for statistics shared by it.
    """
    batched = VecEnv(EpisodeStatistics(env))
    return NormalizeObservation(batched, axis_name=axis_name) if normalize_obs else batched


__all__ = ["CastObservation", "EnvSpec", "EnvSpecError", "EpisodeStatistics",
           "NormalizeObservation", "VecEnv", "check_env", "make", "make_batched",
           "registered_envs", "spec_of"]
