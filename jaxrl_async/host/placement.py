"""Where a host run acts and learns: `pipeline.placement=split` puts the actors' policy
on the first device and the learner on the last (two CPU devices, one per core, as
`import jaxrl_async` sets them up, or two accelerators); otherwise ("auto", "fused")
both use JAX's first device, which is the GPU where there is one."""

from __future__ import annotations

from typing import Any

import jax

from jaxrl_async.config.loader import Config
from jaxrl_async.errors import ConfigError


def host_placement(config: Config) -> str:
    """ "split" or "fused", as the run records it."""
    return "split" if config.pipeline.placement == "split" else "fused"


def host_devices(config: Config) -> tuple[Any, Any]:
    """(the actors' device, the learner's device); a one-line ConfigError for a split
    on a machine with one device."""
    devices = jax.devices()
    if host_placement(config) == "fused":
        return devices[0], devices[0]
    if len(devices) < 2:
        raise ConfigError(
            f"host env {config.env.name}: pipeline.placement=split needs 2 devices, "
            f"this machine has 1 ({devices[0].platform})"
        )
    return devices[0], devices[-1]
