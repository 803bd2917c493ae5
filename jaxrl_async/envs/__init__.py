"""Environments: `make(name, **kwargs)` for gymnax ids, registered names and a user's
`module.path:factory`; the spec check and the wrappers.

gymnax is imported lazily (`gymnax_import`): a CLI call that fails on its config
should not pay for it.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jaxrl_async.envs import suites
from jaxrl_async.envs.gymnax_import import import_gymnax
from jaxrl_async.envs.spec import EnvSpec, check_env, spec_of
from jaxrl_async.envs.wrappers import (
    CastObservation,
    EpisodeStatistics,
    MaskObservation,
    NormalizeObservation,
    VecEnv,
)
from jaxrl_async.errors import ConfigError, EnvSpecError, building_env, first_line

# Envs registered from Python (`register`), by name: factory(**kwargs) -> env or (env, params).
_REGISTERED: dict[str, Callable] = {}


def register(name: str, factory: Callable) -> None:
    """Make `env.name=<name>` build `factory(**env.kwargs)`, which returns a gymnax-API env
    or an (env, env_params) pair (else the env's `default_params`). For notebooks; a run
    that must be resumed or evaluated from the command line names a `module.path:factory`
    instead, which any process can import again."""
    if not name or name in _gymnax_ids():
        raise ConfigError(f"cannot register env {name!r}: empty or a gymnax id")
    _REGISTERED[name] = factory


def registered_envs() -> list[str]:
    """The gymnax ids, then the names given to `register`."""
    return [*_gymnax_ids(), *_REGISTERED]


def _gymnax_ids() -> list[str]:
    gymnax = import_gymnax()
    return list(gymnax.registered_envs)


def make(name: str, **kwargs):
    """(env, env_params) for `name` with `kwargs` (the config's `env.kwargs`):

    - a gymnax id (`CartPole-v1`);
    - `<suite>:<id>` for an env suite (`brax:ant`, `jumanji:Snake-v1`; `suites.SUITES`);
    - a name given to `register`;
    - `module.path:factory`, a callable importable from the run's Python path (the
      working directory included), called with `kwargs`.

    Unknown names, factories that do not import or return no env, and kwargs the env
    rejects are one-line ConfigErrors (UserError for an env that fails to build).
    """
    from jaxrl_async.envs import suites

    if name.partition(":")[0] in suites.SUITES:
        return suites.make(name, **kwargs)
    if name in _REGISTERED:
        return _from_factory(name, _REGISTERED[name], kwargs)
    if name.partition(":")[0] in suites.SUITES:
        return suites.make(name, **kwargs)
    if ":" in name:
        return _from_factory(name, _import_factory(name), kwargs)
    return _make_gymnax(name, **kwargs)


def _import_factory(name: str) -> Callable:
    module_name, _, attr = name.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"env.name={name!r}: expected a gymnax id or module.path:factory")
    cwd = os.getcwd()
    if cwd not in sys.path:  # `jaxrl-async` (unlike `python -m`) does not put it there
        sys.path.append(cwd)
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001  (any error while importing the user's module)
        raise ConfigError(
            f"env.name={name!r}: not a suite ({', '.join(suites.SUITES)}) and "
            f"cannot import {module_name!r}: "
            f"{type(e).__name__}: {first_line(e)}"
        ) from None
    factory: Any = module
    for part in attr.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise ConfigError(f"env.name={name!r}: module {module_name!r} has no {attr!r}")
    if not callable(factory):
        raise ConfigError(f"env.name={name!r}: {attr!r} is not callable")
    return factory


def _from_factory(name: str, factory: Callable, kwargs: dict):
    with building_env(repr(name), kwargs):
        made = factory(**kwargs)
    env, params = made if isinstance(made, tuple) and len(made) == 2 else (made, None)
    missing = [
        m
        for m in ("reset", "step", "observation_space", "action_space")
        if not callable(getattr(env, m, None))
    ]
    if missing:
        raise ConfigError(
            f"env.name={name!r} returned {type(env).__name__}, not a gymnax-API "
            f"env (no {', '.join(missing)})"
        )
    return env, getattr(env, "default_params", None) if params is None else params


def _make_gymnax(name: str, **kwargs):
    """(env, params) for a gymnax id; ConfigError for an unknown one.

    `kwargs` naming a field of the env's params (`memory_length` of MemoryChain-bsuite)
    set it in the default params; the others go to the env's constructor. A few gymnax
    envs emit observations of another dtype than their space declares (Catch-bsuite,
    FourRooms-misc); those are cast to the declared dtype so they pass `check_env` like
    any other.
    """
    gymnax = import_gymnax()
    if name not in gymnax.registered_envs:
        raise ConfigError(
            f"unknown env {name!r} (a gymnax id, a registered name or "
            f"module.path:factory; `jaxrl-async envs` lists them)"
        )
    with building_env(repr(name), kwargs):  # MNISTBandit downloads MNIST when built
        env, params = gymnax.make(name)
        fields = {f.name for f in dataclasses.fields(params)}
        constructor = {k: v for k, v in kwargs.items() if k not in fields}
        if constructor:
            env, params = gymnax.make(name, **constructor)
        params = params.replace(**{k: v for k, v in kwargs.items() if k in fields})
    declared = np.dtype(env.observation_space(params).dtype)
    obs, _ = jax.eval_shape(env.reset, jax.random.key(0), params)
    if np.dtype(obs.dtype) != declared:
        env = CastObservation(env, declared)
    return env, params


def resolve(config, env=None, env_params=None):
    """(env, env_params) of a run's `env` section (an EnvConfig): `env` if given (a custom
    env passed to `train`), else built from `config.name` and `config.kwargs`; params
    default to the env's own. With `config.mask_obs`, the listed observation entries are
    zeroed (MaskObservation); an index the observation does not have is a ConfigError."""
    if env is None:
        env, default_params = make(config.name, **config.kwargs)
    else:
        default_params = getattr(env, "default_params", None)
    env_params = default_params if env_params is None else env_params
    if config.mask_obs:
        check_mask(config, spec_of(env, env_params).obs_shape)
        env = MaskObservation(env, config.mask_obs)
    return env, env_params


def check_mask(config, shape) -> None:
    """A one-line ConfigError unless `config.mask_obs` (an EnvConfig's) indexes the last
    axis of an array observation of `shape` (a JAX env's, or a host env's)."""
    what = f"env.mask_obs={list(config.mask_obs)}"
    if isinstance(shape, dict) or not shape:
        raise ConfigError(f"{what} needs an array observation; {config.name} observes {shape}")
    bad = [i for i in config.mask_obs if not 0 <= i < shape[-1]]
    if bad:
        raise ConfigError(
            f"{what}: index {bad[0]} is out of range for {config.name}'s "
            f"observation of shape {shape} (indices into its last axis, "
            f"0 to {shape[-1] - 1})"
        )


def make_batched(env, normalize_obs: bool = False, axis_name: str | None = None):
    """The batched env the pipeline steps: episode statistics, vmap, optional normalisation.

    `axis_name`: the mesh axis the batch is sharded over, for statistics shared by it.
    """
    batched = VecEnv(EpisodeStatistics(env))
    return NormalizeObservation(batched, axis_name=axis_name) if normalize_obs else batched


__all__ = [
    "CastObservation",
    "EnvSpec",
    "EnvSpecError",
    "EpisodeStatistics",
    "MaskObservation",
    "NormalizeObservation",
    "VecEnv",
    "check_env",
    "check_mask",
    "make",
    "make_batched",
    "register",
    "registered_envs",
    "resolve",
    "spec_of",
]
