"""How many devices a host env's run (env.name=gymnasium:<id> or envpool:<task>) spans,
and the checks on that count that need no machine.

A host run's `pipeline.devices` is the size of its learner's mesh (0: one device), over
which each round's envs split; its checkpoints record it as `devices`, which a resume
pins as a JAX run's does (`rundir.resume_config`). Fused, the actors' policy acts on the
mesh's first device; split, on a device of its own in front of the mesh, so the run
spans one device more. (A JAX run's `pipeline.devices` counts its actor devices too; a
host run's actors are threads with one policy device, and its checkpoints have always
recorded the learner's count.) Unlike a JAX run's, the count does not depend on the
machine (the run refuses one with too few devices when it starts, `host/placement.py`),
so whatever depends on it is checked when the config loads.
"""

from __future__ import annotations

from typing import Any

from jaxrl_async.errors import ConfigError


def host_learner_devices(config: Any) -> int:
    """The devices of the learner's mesh, over which each round's envs split: what a
    host run's checkpoints record as `devices`."""
    return config.pipeline.devices or 1


def host_run_devices(config: Any) -> int:
    """The devices the host run spans: the learner's, and split, the actors' one."""
    return host_learner_devices(config) + (1 if config.pipeline.placement == "split" else 0)


def check_host_devices(config: Any) -> None:
    """One-line ConfigErrors for a device count the host executor does not run: a split
    with other than one actor device, an off-policy learner on more
    than one device (its replay is kept whole on one), envs that do not split evenly over
    the learner's devices, and whatever the agent's own check refuses at that count."""
    pipeline, name = config.pipeline, config.env.name
    learners = host_learner_devices(config)
    if pipeline.placement == "split" and pipeline.actor_devices != 1:
        raise ConfigError(
            f"host env {name}: pipeline.placement=split acts on one device "
            f"(pipeline.actor_devices=1), got {pipeline.actor_devices}"
        )
    if config.agent.off_policy and learners > 1:
        raise ConfigError(
            f"host env {name}: an off-policy learner runs on one device (its replay is not "
            f"split over devices); got {learners} learner devices"
        )
    if config.env.num_envs % learners:
        raise ConfigError(
            f"host env {name}: env.num_envs={config.env.num_envs} does not split over "
            f"{learners} learner devices (set a multiple of {learners} envs)"
        )
    if learners > 1:
        config.agent.check(config, learners)
