"""Several processes (one per host, or several on one host) training as one mesh.

Every process runs the same program: `initialize` joins the processes through
`jax.distributed` before any other JAX call, after which `jax.devices()` lists the
devices of every process and the pipeline's mesh spans them all (pipeline.make_mesh).
Each process then steps the envs of its own devices and keeps their replay shard;
`lax.pmean` inside the learner averages gradients over every device of every process.
Only process 0 writes the run directory (trainer.py); the others compute the same
metrics silently.

Settings come from the `distributed` config section or, where it is unset, from the
environment: JAX_COORDINATOR_ADDRESS (read by JAX itself too), JAX_NUM_PROCESSES and
JAX_PROCESS_ID.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any, cast

from jaxrl_async.config.loader import (
    DistributedConfig,
    _first_line,
    _parse_overrides,
    _resolve,
)
from jaxrl_async.errors import ConfigError, UserError

ENV_COORDINATOR = "JAX_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "JAX_NUM_PROCESSES"
ENV_PROCESS_ID = "JAX_PROCESS_ID"


def settings(
    name_or_path: str | os.PathLike | None = None,
    overrides: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> DistributedConfig:
    """The resolved `distributed` section of a config, without starting JAX.

    Reads only that section of the YAML (none when `name_or_path` is None) and the
    `distributed.*` overrides; the rest of the config is validated later by
    `load_config`, which needs JAX's device count and so must come after `initialize`.
    """
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    layers = []
    if name_or_path is not None:
        path = _resolve(name_or_path)
        try:
            raw = OmegaConf.load(path)
        except Exception as e:  # noqa: BLE001  (YAML syntax errors come in many types)
            raise ConfigError(f"cannot parse {path}: {_first_line(e)}") from None
        if isinstance(raw, DictConfig) and "distributed" in raw:
            layers.append(raw["distributed"])
    dotlist = _parse_overrides(overrides)
    if "distributed" in dotlist:
        layers.append(dotlist["distributed"])
    try:
        merged = OmegaConf.merge(OmegaConf.structured(DistributedConfig), *layers)
        section = cast(DistributedConfig, OmegaConf.to_object(merged))
    except ConfigError:
        raise
    except OmegaConfBaseException as e:
        cause = e.__cause__ if isinstance(e.__cause__, ConfigError) else None
        if cause is not None:
            raise cause from None
        key, msg = getattr(e, "full_key", None), _first_line(e)
        if key and "not in" in msg:
            raise ConfigError(f"unknown config key 'distributed.{key}'") from None
        raise ConfigError(f"bad value for distributed.{key}: {msg}" if key else msg) from None
    return resolve(section, environ)


def resolve(
    section: DistributedConfig, environ: Mapping[str, str] | None = None
) -> DistributedConfig:
    """Unset fields filled from the environment; ConfigError if they do not fit together."""
    environ = os.environ if environ is None else environ

    def from_env(name: str, default: int) -> int:
        value = environ.get(name, "")
        if value == "":
            return default
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"${name} must be an integer, got {value!r}") from None

    section = dataclasses.replace(
        section,
        coordinator=section.coordinator or environ.get(ENV_COORDINATOR, ""),
        num_processes=section.num_processes or from_env(ENV_NUM_PROCESSES, 1),
        process_id=(section.process_id if section.process_id >= 0 else from_env(ENV_PROCESS_ID, 0)),
    )  # __post_init__ checks the ranges
    if section.num_processes < 1:
        raise ConfigError(f"distributed.num_processes must be >= 1, got {section.num_processes}")
    if not 0 <= section.process_id < section.num_processes:
        raise ConfigError(
            f"distributed.process_id={section.process_id} is not in "
            f"[0, {section.num_processes}) for {section.num_processes} processes"
        )
    if section.num_processes > 1 and not section.coordinator:
        raise ConfigError(
            f"{section.num_processes} processes need distributed.coordinator="
            f"HOST:PORT (process 0's address) or ${ENV_COORDINATOR}"
        )
    return section


def initialize(
    name_or_path: str | os.PathLike | None = None,
    overrides: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> DistributedConfig:
    """Join the other processes when the config (or the environment) asks for several.

    Call it before anything else touches JAX, `load_config` included (it counts the
    devices); the CLI does. Blocks until all `num_processes` have joined (at most
    `distributed.timeout` seconds). A no-op for one process, or when JAX's
    distributed runtime is already up. Returns the resolved settings.
    """
    import jax

    section = settings(name_or_path, overrides, environ)
    if section.num_processes == 1:
        return section
    if jax.distributed.is_initialized():
        check(section)
        return section
    try:
        jax.distributed.initialize(
            section.coordinator,
            section.num_processes,
            section.process_id,
            initialization_timeout=section.timeout,
        )
        jax.devices()  # the processes exchange their devices: a late failure surfaces here
    except Exception as e:  # noqa: BLE001  (the runtime raises several types)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        if "must be called before" in first:  # JAX's own check: its backend has started
            raise UserError(
                "jaxrl_async.run.distributed.initialize must run before any other JAX "
                "call (load_config included): JAX has already started on its own"
            ) from None
        raise UserError(
            f"process {section.process_id} of {section.num_processes} could not "
            f"join the coordinator at {section.coordinator}: {first}"
        ) from None
    return section


def check(section: DistributedConfig) -> None:
    """UserError unless JAX runs as many processes as `section` (resolved) asks for."""
    import jax

    section = resolve(section)
    if section.num_processes > 1 and jax.process_count() != section.num_processes:
        raise UserError(
            f"the config asks for {section.num_processes} processes but JAX runs "
            f"{jax.process_count()}: call jaxrl_async.run.distributed.initialize "
            f"before any other JAX call (the CLI does)"
        )


def is_main() -> bool:
    """True in the process that writes files and prints (process 0)."""
    import jax

    return jax.process_index() == 0


def any_process(flag: bool) -> bool:
    """True in every process when `flag` is true in any of them; a collective with several
    processes (every process must call it at the same point)."""
    import jax
    import numpy as np

    if jax.process_count() == 1:
        return bool(flag)
    from jax.experimental import multihost_utils

    return bool(np.any(multihost_utils.process_allgather(np.asarray([flag], np.int32))))


def gather(tree: Any) -> Any:
    """Host (numpy) copies of every leaf, whole, in every process; typed PRNG keys as their
    key data. A leaf split over other processes' devices is all-gathered: a collective,
    so with several processes every process must call this at the same point."""
    import jax
    import numpy as np

    def host(leaf):
        if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            if leaf.sharding.is_fully_replicated:
                return np.asarray(leaf.addressable_data(0))
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))
        return np.asarray(jax.device_get(leaf))

    return jax.tree.map(host, tree)


def local(tree: Any) -> Any:
    """This process's copy of every replicated leaf (a single-device array), for
    host-side work in one process; leaves already addressable pass through. A leaf
    split over other processes' devices has no local copy: `gather` it instead."""
    import jax

    def one(leaf):
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            if not leaf.sharding.is_fully_replicated:
                raise ValueError(
                    f"a {leaf.shape} array split over several processes has no "
                    f"local copy; use gather"
                )
            return leaf.addressable_data(0)
        return leaf

    return jax.tree.map(one, tree)
