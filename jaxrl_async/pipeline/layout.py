"""Where a run's work goes: how many devices, fused or split placement, and why.

A config is a plain value: loading it asks no device. The layout is chosen once per run,
from the config and the machine (`Machine.current()`, the only place that asks JAX),
by `choose_layout`, which also runs every check that depends on the device count. The
run carries the result (`RunPlan.layout`), records it in each checkpoint, and a resume
pins it (`rundir.resume_config`).

The rules for `pipeline.devices=0` and `pipeline.placement=auto` follow what paid on the
CPU machines benchmarked (docs/performance.md#devices-and-placement):

- On CPU a memoryless off-policy learner (DQN, SAC, TD3) stays on one device: its
  batches are too small to pay for an all-reduce per gradient step. A recurrent one
  (R2D2) scans over time, so it takes the most devices its batches split over.
- An on-policy learner splits only where each device gets at least MIN_ROWS_PER_DEVICE
  rows in every gradient step and MIN_STEPS_PER_DEVICE env steps in every tick; below
  that the all-reduces and two programs sharing the cores cost what the smaller share
  saves. On CPU a learner with a layer of WIDE_LAYER units or more stays on one device
  (wide layers already use every core through XLA's threads).
- Auto placement splits a small memoryless on-policy MLP learner at lag >= 1 over one
  actor and one learner CPU device, where a fused run would keep to one: the halves of
  its tick then overlap on two cores.
Off CPU nothing is benchmarked yet; the thresholds apply to every learner.
"""

from __future__ import annotations

import dataclasses

from jaxrl_async.config.loader import Config
from jaxrl_async.errors import ConfigError

MIN_ROWS_PER_DEVICE = 256
MIN_STEPS_PER_DEVICE = 1024
WIDE_LAYER = 128


@dataclasses.dataclass(frozen=True)
class Machine:
    """What a layout depends on: the platform and the devices of every process."""

    platform: str  # "cpu", "gpu", "tpu"
    device_count: int  # devices of every process: the mesh spans them all
    process_count: int = 1

    @classmethod
    def current(cls) -> Machine:
        import jax

        return cls(jax.default_backend(), jax.device_count(), jax.process_count())


@dataclasses.dataclass(frozen=True)
class Layout:
    """A run's devices and placement, with the reasons `plan`-like output can print."""

    devices: int  # the devices the run's mesh spans (split: actors and learners together)
    placement: str  # "fused" or "split"
    actor_devices: int  # split: the first devices, which act; fused: 0
    platform: str
    devices_why: str
    placement_why: str

    @property
    def learner_devices(self) -> int:
        """The devices the learner (and an off-policy run's replay) splits over."""
        return self.devices - self.actor_devices

    def line(self) -> str:
        """One short line for a run's output, e.g. `devices: 1 CPU, fused`."""
        where = f"{self.devices} {self.platform.upper()}"
        if self.placement == "split":
            return f"devices: {where}, split ({self.actor_devices} acting)"
        return f"devices: {where}, fused"


def choose_layout(config: Config, machine: Machine | None = None) -> Layout:
    """The run's layout on `machine` (default: this one), checked: a ConfigError with one
    line if the run's batches cannot be laid out over its devices."""
    machine = Machine.current() if machine is None else machine
    devices, devices_why = choose_devices(config, machine)
    placement, placement_why = choose_placement(config, machine)
    actor_devices = config.pipeline.actor_devices if placement == "split" else 0
    layout = Layout(devices, placement, actor_devices, machine.platform, devices_why, placement_why)
    check_layout(config, layout, machine)
    return layout


def learner_rows(config: Config) -> int:
    """Rows one gradient step computes at once, over all devices and seeds: its samples,
    or for a recurrent network the sequences it scans over (the scan's steps run one
    after another whatever the device count, so only its width splits)."""
    agent = config.agent
    if agent.off_policy:
        rows = config.replay.batch_size  # transitions, or R2D2's sequences
    elif agent.recurrent:
        rows = config.env.num_envs // agent.minibatches
    else:
        rows = config.batch_size // agent.minibatches
    return rows * config.train.num_seeds


def choose_devices(config: Config, machine: Machine) -> tuple[int, str]:
    """(devices, why): `pipeline.devices` if set; with 0, all devices where a run must span
    them (several processes, split placement), else by the rules in the module docstring."""
    available = machine.device_count
    if config.pipeline.devices:
        return config.pipeline.devices, f"pipeline.devices={config.pipeline.devices}"
    if available == 1:
        return 1, "the only device"
    if machine.process_count > 1:
        return available, "a run over several processes spans every device"
    if config.pipeline.placement == "split":
        return available, "split placement"
    if config.pipeline.placement == "auto" and _auto_split(config, machine):
        return 2, "split placement: one CPU device acts, one learns"
    return _fused_devices(config, machine)


def _fused_devices(config: Config, machine: Machine) -> tuple[int, str]:
    """`choose_devices` for a fused run over up to `machine.device_count` (> 1) devices."""
    available = machine.device_count
    force = f"(pipeline.devices={available} forces {available})"
    agent = config.agent
    if machine.platform == "cpu":
        if agent.off_policy:
            if not agent.recurrent:
                return 1, (
                    f"one device: on CPU a memoryless off-policy learner stays on one {force}"
                )
            for devices in range(available, 1, -1):
                if _splits_over(config, devices, machine):
                    return devices, (
                        f"data parallel over {devices} of {available} CPU "
                        f"devices (a recurrent off-policy learner)"
                    )
            return 1, f"one device: the run's batches split over no more {force}"
        if agent.widest_layer >= WIDE_LAYER:
            return 1, (
                f"one device: on CPU an on-policy learner with {WIDE_LAYER}-unit or "
                f"wider layers stays on one {force}"
            )
    rows = learner_rows(config) // available
    steps = config.batch_size * config.train.num_seeds // available
    share = (
        f"{rows:,} rows per gradient step and {steps:,} env steps per tick on "
        f"each of {available} devices"
    )
    if config.env.num_envs % available:
        return 1, f"{config.env.num_envs} envs do not split over {available} devices"
    if rows >= MIN_ROWS_PER_DEVICE and steps >= MIN_STEPS_PER_DEVICE:
        return available, f"data parallel: {share}"
    return 1, (
        f"one device: {share} would be below {MIN_ROWS_PER_DEVICE:,} and "
        f"{MIN_STEPS_PER_DEVICE:,}, where splitting pays {force}"
    )


def _auto_split(config: Config, machine: Machine) -> bool:
    """Whether `pipeline.placement=auto` splits the run: a memoryless on-policy MLP
    learner narrower than WIDE_LAYER at lag >= 1, one run in one process on CPU with two
    or more devices (none pinned), where a fused run would keep to one device. Recurrent
    and wide learners stay fused (the update is most of their tick, so there is little
    to overlap), and so do off-policy ones."""
    agent = config.agent
    return (
        config.pipeline.lag >= 1
        and config.pipeline.devices == 0
        and not agent.off_policy
        and not agent.recurrent
        and agent.torso == "mlp"
        and agent.widest_layer < WIDE_LAYER
        and config.train.num_seeds == 1
        and machine.process_count == 1
        and machine.platform == "cpu"
        and machine.device_count >= 2
        and _fused_devices(config, machine)[0] == 1
    )


def choose_placement(config: Config, machine: Machine) -> tuple[str, str]:
    """(placement, why): `pipeline.placement` if fused or split; for auto, split where
    `_auto_split` says it pays, else fused."""
    if config.pipeline.placement != "auto":
        return config.pipeline.placement, f"pipeline.placement={config.pipeline.placement}"
    if _auto_split(config, machine):
        return "split", (
            "split: lag >= 1 and a learner too small for data parallelism, so "
            "the actor and the learner overlap on a CPU device each"
        )
    return "fused", "fused: actor and learner share the devices"


def _splits_over(config: Config, devices: int, machine: Machine) -> bool:
    """Whether the run's batches (envs, minibatches, replay) divide over `devices`."""
    candidate = Layout(devices, "fused", 0, machine.platform, "", "")
    try:
        check_layout(config, candidate, machine)
    except ConfigError:
        return False
    return True


def check_layout(config: Config, layout: Layout, machine: Machine) -> None:
    """The checks that depend on the devices: the count exists, and every batch (envs,
    minibatches, replay) splits over the devices that hold it."""
    processes, available = machine.process_count, machine.device_count
    if config.pipeline.devices > available:
        where = "local devices" if processes == 1 else f"devices over {processes} processes"
        raise ConfigError(
            f"pipeline.devices={config.pipeline.devices} but only {available} {where}"
        )
    if processes > 1 and layout.devices != available:  # the mesh spans every process
        raise ConfigError(
            f"pipeline.devices={layout.devices}: a run over {processes} "
            f"processes uses all {available} devices (set 0)"
        )
    if processes > 1 and layout.placement == "split":
        raise ConfigError(
            "pipeline.placement=split runs in one process; use fused with several processes"
        )
    groups = [layout.devices]
    if layout.placement == "split":
        if not 1 <= config.pipeline.actor_devices < layout.devices:
            raise ConfigError(
                f"pipeline.placement=split needs 1 <= pipeline.actor_devices < "
                f"{layout.devices} devices, got {config.pipeline.actor_devices}"
            )
        groups = [config.pipeline.actor_devices, layout.learner_devices]
    for group in groups:
        if config.env.num_envs % group:
            raise ConfigError(
                f"env.num_envs={config.env.num_envs} does not split over {group} "
                f"devices (set pipeline.devices or a multiple of {group} envs)"
            )
    if config.agent.off_policy:  # the replay is split over the learner's devices
        for key in ("capacity", "batch_size"):
            value = getattr(config.replay, key)
            if value % groups[-1]:
                raise ConfigError(
                    f"replay.{key}={value} does not split over {groups[-1]} "
                    f"devices (each device keeps its own replay; use a multiple "
                    f"of {groups[-1]})"
                )
    config.agent.check(config, layout.devices)
