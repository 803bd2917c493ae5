"""What a plan holds whatever the engine (`tools/plan.py` for a JAX env, `tools/host_plan.py`
for a host env): the run's size, devices, bytes per device, calls and programs, and whether
the footprint fits the devices' memory."""

from __future__ import annotations

from jaxrl_async.config.loader import Config
from jaxrl_async.pipeline import footprint as memory
from jaxrl_async.training.plan import RunPlan


def common_plan(config: Config, plan: RunPlan, footprint: memory.Footprint, programs) -> dict:
    layout = plan.layout
    return {
        "config": config.name,
        "env": config.env.name,
        "agent": config.agent.name,
        "env_steps": plan.num_updates * plan.batch,
        "devices": {
            "count": layout.devices,
            "platform": layout.platform,
            "placement": layout.placement,
            "actor_devices": layout.actor_devices,
            "line": layout.line(),
            "devices_why": layout.devices_why,
            "placement_why": layout.placement_why,
        },
        "bytes_per_device": {**footprint.parts, "total": footprint.total},
        "host_calls": plan.num_calls,
        "ticks_per_call": plan.ticks,
        "env_steps_per_call": plan.steps_per_call,
        "programs": programs,
        "checkpoint_bytes": footprint.state_bytes,
    }


def memory_fits(footprint: memory.Footprint, devices) -> dict | None:
    """The memory the run's devices have, and whether the footprint fits (None where
    unknown, or planned for another platform)."""
    available = None if devices is None else memory.device_memory(devices)
    if available is None:
        return None
    return {"bytes": available[0], "what": available[1], "fits": footprint.total <= available[0]}
