"""Typed, frozen run configuration: YAML files, dotted overrides, validation.

A run config has the sections in `Config.SECTIONS` (`env`, `agent`, `pipeline`, `replay`,
`train`, `checkpoint`, `eval`, `distributed`). YAML and
overrides are merged onto the dataclass schema by OmegaConf, which rejects
unknown keys and values of the wrong type; range checks live in each section's
`__post_init__`. Every failure is a `ConfigError` with a one-line message that
names the offending key.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any, ClassVar, Sequence

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from jaxrl_async.agents.configs import AGENT_CONFIGS
from jaxrl_async.errors import ConfigError, require

CONFIG_DIR = Path(__file__).parent / "configs"
REPLAY_KINDS = ("prioritized", "uniform")
EVAL_MODES = ("greedy", "sample")
PRNG_IMPLS = ("auto", "philox4x32", "threefry2x32", "rbg", "unsafe_rbg")
_OVERRIDE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+=")


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    # A gymnax id, a name given to envs.register, or module.path:factory (envs.make).
    name: str = "CartPole-v1"
    num_envs: int = 4
    normalize_obs: bool = False
    # Keyword arguments of the env's constructor or factory (`env.kwargs.size=8`).
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Observation entries (indices into the last axis) zeroed for a partially observed
    # variant, e.g. [1, 3]: CartPole without its velocities (envs.MaskObservation).
    mask_obs: tuple[int, ...] = ()

    def __post_init__(self):
        require(self.num_envs >= 1, "env.num_envs", self.num_envs, ">= 1")
        require(all(i >= 0 for i in self.mask_obs), "env.mask_obs", list(self.mask_obs),
                "indices >= 0 into the observation's last axis")


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    rollout_len: int = 128
    # Updates between the parameters that act and the learner that consumes their data:
    # 0 is synchronous; L >= 1 double-buffers the trajectory and acts with a queue of the
    # last L parameter versions (see pipeline.py).
    lag: int = 0
    # Skip learner updates on data produced more than this many updates ago; -1: never.
    max_staleness: int = -1
    # Devices the env batch and the learner's batch are split over. 0: chosen per run
    # (`choose_devices`): all of them where splitting pays, else one. With several
    # processes (`distributed`) the mesh spans every device of every process.
    devices: int = 0
    # "fused": actor and learner share every device, one program per host call.
    # "split": the first `actor_devices` devices act, the rest learn, and the host
    # dispatches both halves of each tick at once (needs lag >= 1 and 2+ devices).
    # "auto": split over one actor and one learner CPU device where that pays
    # (`choose_placement`), else fused.
    placement: str = "auto"
    actor_devices: int = 1
    # lax.scan unroll of the rollout: fewer loop iterations on CPU, longer compile.
    unroll: int = 1

    def __post_init__(self):
        require(self.rollout_len >= 1, "pipeline.rollout_len", self.rollout_len, ">= 1")
        require(self.lag >= 0, "pipeline.lag", self.lag, ">= 0")
        require(self.max_staleness >= -1, "pipeline.max_staleness", self.max_staleness,
                ">= -1 (-1: no bound)")
        require(self.unroll >= 1, "pipeline.unroll", self.unroll, ">= 1")
        require(self.devices >= 0, "pipeline.devices", self.devices, ">= 0 (0: choose)")
        require(self.placement in ("auto", "fused", "split"), "pipeline.placement",
                self.placement, "auto, fused or split")
        require(self.actor_devices >= 1, "pipeline.actor_devices", self.actor_devices, ">= 1")


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    """The replay of off-policy agents (ignored by on-policy ones); split evenly over devices."""

    kind: str = "prioritized"  # or "uniform"
    capacity: int = 100_000  # transitions, over all devices
    batch_size: int = 128  # sampled per learner update, over all devices
    learning_starts: int = 10_000  # env steps before the first update
    alpha: float = 0.6  # prioritization exponent
    beta: float = 0.4  # importance-weight exponent at the start, annealed to 1 at the end
    priority_eps: float = 1e-6  # added to |TD error| so no transition becomes undrawable

    def __post_init__(self):
        require(self.kind in REPLAY_KINDS, "replay.kind", self.kind, f"one of {REPLAY_KINDS}")
        require(self.capacity >= 1, "replay.capacity", self.capacity, ">= 1")
        require(self.batch_size >= 1, "replay.batch_size", self.batch_size, ">= 1")
        require(self.learning_starts >= 0, "replay.learning_starts", self.learning_starts, ">= 0")
        require(self.alpha >= 0, "replay.alpha", self.alpha, ">= 0")
        require(0 <= self.beta <= 1, "replay.beta", self.beta, "in [0, 1]")
        require(self.priority_eps > 0, "replay.priority_eps", self.priority_eps, "> 0")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    total_steps: int = 500_000
    seed: int = 0
    # Seeds seed, seed+1, ... trained side by side: the whole run vmapped in one program.
    num_seeds: int = 1
    # Env steps between host calls (log points); rounded so the chunks tile the run.
    log_every: int = 32_768
    progress: bool = True
    compile_cache: bool = True
    # Counter-based PRNG of the run's keys. "auto": philox4x32 on any device count (JAX
    # lowers threefry on CPU as a rolled loop, ~1.5x slower for a 4-env rollout; on several
    # devices philox compiles through sharding.lower_mulhi_on_meshes).
    # Set one explicitly for numbers that do not depend on the device count.
    prng: str = "auto"
    # Compile for bitwise run-to-run reproducibility on every backend (XLA's deterministic
    # GPU ops; CPU runs are deterministic anyway). See README "Reproducibility".
    deterministic: bool = False

    def __post_init__(self):
        require(self.total_steps >= 1, "train.total_steps", self.total_steps, ">= 1")
        require(self.seed >= 0, "train.seed", self.seed, ">= 0")
        require(self.num_seeds >= 1, "train.num_seeds", self.num_seeds, ">= 1")
        require(self.log_every >= 1, "train.log_every", self.log_every, ">= 1")
        require(self.prng in PRNG_IMPLS, "train.prng", self.prng, f"one of {PRNG_IMPLS}")


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    """Checkpoints of a run that writes a run directory (RUN_DIR/checkpoints/<env steps>).

    A final checkpoint, and one on Ctrl-C / SIGTERM, are always written there; `every`
    adds periodic ones, at the first host-call boundary past each multiple.
    """

    every: int = 0  # env steps between periodic checkpoints; 0: no periodic checkpoints
    keep: int = 3  # the most recent checkpoints kept on disk

    def __post_init__(self):
        require(self.every >= 0, "checkpoint.every", self.every, ">= 0 (0: only at the end)")
        require(self.keep >= 1, "checkpoint.keep", self.keep, ">= 1")


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """Evaluation on separate envs: the first episode of each of `episodes` fresh envs."""

    every: int = 0  # env steps between evaluations (and one at the end); 0: no evaluation
    episodes: int = 16
    mode: str = "greedy"  # the deterministic action, or "sample" (the acting policy's draws)
    max_steps: int = 0  # the cap on an episode; 0: the env's own limit, else 10000

    def __post_init__(self):
        require(self.every >= 0, "eval.every", self.every, ">= 0 (0: no evaluation)")
        require(self.episodes >= 1, "eval.episodes", self.episodes, ">= 1")
        require(self.mode in EVAL_MODES, "eval.mode", self.mode, f"one of {EVAL_MODES}")
        require(self.max_steps >= 0, "eval.max_steps", self.max_steps,
                ">= 0 (0: the env's own limit)")


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """How this session joins a multi-process run (`jax.distributed`); one process if unset.

    Launch settings, not part of the run: they stay out of the run directory's
    config.yaml, and a resume gives its own. Resolved against JAX's environment
    variables by `jaxrl_async.distributed`, which must run before any other JAX call.
    """

    coordinator: str = ""  # HOST:PORT of process 0; "": $JAX_COORDINATOR_ADDRESS
    num_processes: int = 0  # 0: $JAX_NUM_PROCESSES, else 1
    process_id: int = -1  # -1: $JAX_PROCESS_ID, else 0
    timeout: int = 300  # seconds to wait for every process to join

    def __post_init__(self):
        address = self.coordinator == "" or re.fullmatch(r"\S+:\d+", self.coordinator)
        require(bool(address), "distributed.coordinator", self.coordinator, "HOST:PORT")
        require(self.num_processes >= 0, "distributed.num_processes", self.num_processes,
                ">= 0 (0: from the environment)")
        require(self.process_id >= -1, "distributed.process_id", self.process_id,
                ">= 0 (-1: from the environment)")
        require(self.timeout >= 1, "distributed.timeout", self.timeout, ">= 1")


@dataclasses.dataclass(frozen=True)
class Config:
    name: str = "custom"
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    agent: Any = None  # one of AGENT_CONFIGS, chosen by agent.name
    pipeline: PipelineConfig = dataclasses.field(default_factory=PipelineConfig)
    replay: ReplayConfig = dataclasses.field(default_factory=ReplayConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    distributed: DistributedConfig = dataclasses.field(default_factory=DistributedConfig)

    SECTIONS: ClassVar[tuple[str, ...]] = ("env", "agent", "pipeline", "replay", "train",
                                             "checkpoint", "eval", "distributed")

    @property
    def batch_size(self) -> int:
        """Env steps per update: one rollout of every env."""
        return self.env.num_envs * self.pipeline.rollout_len

    @property
    def num_updates(self) -> int:
        return self.train.total_steps // self.batch_size

    @property
    def num_devices(self) -> int:
        """The devices the run's mesh spans on this machine (`choose_devices`)."""
        return choose_devices(self)[0]

    @property
    def placement(self) -> str:
        """"fused" or "split": `pipeline.placement` resolved on this machine
        (`choose_placement`)."""
        return choose_placement(self)[0]

    @property
    def prng_impl(self) -> str:
        """The PRNG implementation `train.prng` resolves to on this machine."""
        return "philox4x32" if self.train.prng == "auto" else self.train.prng

    def to_yaml(self) -> str:
        """The run's config; `distributed` (how this session was launched) is left out."""
        tree = OmegaConf.to_container(OmegaConf.structured(self))
        tree.pop("distributed")
        return OmegaConf.to_yaml(tree)


def available_configs() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def _resolve(name_or_path: str | os.PathLike) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        return path
    shipped = CONFIG_DIR / f"{name_or_path}.yaml"
    if not shipped.is_file():
        raise ConfigError(
            f"unknown config {str(name_or_path)!r} (available: {', '.join(available_configs())})")
    return shipped


def _parse_overrides(overrides: Sequence[str]):
    for item in overrides:
        if not _OVERRIDE.match(item):
            raise ConfigError(f"malformed override {item!r}: expected section.key=value")
    try:
        return OmegaConf.from_dotlist(list(overrides))
    except OmegaConfBaseException as e:
        raise ConfigError(f"malformed override: {_first_line(e)}") from None


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def _integral_floats_to_int(node, schema_cls) -> None:
    """Accept `total_steps=5e5`: YAML reads it as a float, the field is an int."""
    if not dataclasses.is_dataclass(schema_cls) or not OmegaConf.is_dict(node):
        return
    types = {f.name: f.type for f in dataclasses.fields(schema_cls)}
    for key in list(node.keys()):
        value = node[key]
        if types.get(key) in (int, "int") and isinstance(value, float) and value.is_integer():
            node[key] = int(value)


def load_config(name_or_path: str | os.PathLike = "ppo_cartpole",
                overrides: Sequence[str] = ()) -> Config:
    """Load a shipped config by name (or a YAML path) and apply `section.key=value` overrides."""
    path = _resolve(name_or_path)
    try:
        raw = OmegaConf.load(path)
    except Exception as e:  # YAML syntax errors come in many types
        raise ConfigError(f"cannot parse {path}: {_first_line(e)}") from None
    if not OmegaConf.is_dict(raw):
        raise ConfigError(f"{path} must hold a mapping of sections")
    return _build(raw, overrides, path.stem)


def with_overrides(config: Config, overrides: Sequence[str]) -> Config:
    """`config` with `section.key=value` overrides applied and every check run again."""
    raw = OmegaConf.create(config.to_yaml())
    raw.distributed = OmegaConf.structured(config.distributed)
    return _build(raw, overrides, config.name)


def _build(raw, overrides: Sequence[str], name: str) -> Config:
    """The checked Config of YAML sections `raw` with `overrides` on top."""
    dotlist = _parse_overrides(overrides)
    for layer in (raw, dotlist):
        for key in layer.keys():
            if key not in Config.SECTIONS and key != "name":
                raise ConfigError(f"unknown config section {key!r} "
                                  f"(sections: {', '.join(Config.SECTIONS)})")

    agent_name = OmegaConf.select(dotlist, "agent.name", default=None) or \
        OmegaConf.select(raw, "agent.name", default="ppo")
    if agent_name not in AGENT_CONFIGS:
        raise ConfigError(f"unknown agent {agent_name!r} (available: {', '.join(AGENT_CONFIGS)})")
    agent_cls = AGENT_CONFIGS[agent_name]

    sections = {"env": EnvConfig, "agent": agent_cls, "pipeline": PipelineConfig,
                "replay": ReplayConfig,
                "train": TrainConfig, "checkpoint": CheckpointConfig,
                "eval": EvalConfig, "distributed": DistributedConfig}
    for layer in (raw, dotlist):
        for key, cls in sections.items():
            if key in layer:
                _integral_floats_to_int(layer[key], cls)

    schema = OmegaConf.structured(Config(name=name, agent=agent_cls()))
    OmegaConf.set_readonly(schema, False)
    try:
        merged = OmegaConf.merge(schema, raw, dotlist)
        config = OmegaConf.to_object(merged)
    except ConfigError:
        raise
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        cause = e.__cause__ if isinstance(e.__cause__, ConfigError) else None
        if cause is not None:
            raise cause from None
        msg = _first_line(e)
        if "not in" in msg and key:
            raise ConfigError(f"unknown config key {key!r}") from None
        raise ConfigError(f"bad value for {key}: {msg}" if key else msg) from None
    validate(config)
    return config


# `pipeline.devices=0`. Measured on two forced CPU devices with Philox keys
# (scripts/bench_devices.py; README, Speed), two devices against one, each config as
# shipped. Off-policy learners gained at every size measured (dqn_cartpole 1.18x,
# sac_pendulum 1.34x, td3_pendulum 1.20x, r2d2_cartpole_masked 1.69x,
# dqn_breakout_minatar 1.01x): on CPU they take the most devices their batches split
# over. On-policy ones gained where each device gets at least MIN_ROWS_PER_DEVICE rows in
# every gradient step and MIN_STEPS_PER_DEVICE env steps in every tick (PPO at 2048 envs
# 1.10x, 16 seeds of ppo_cartpole 1.5x) and gained nothing below (ppo_cartpole_async
# 1.06x, ppo_pendulum 0.98x): a gradient step's all-reduce (21-34 us on CPU) and two
# device programs that slow each other cost about what the smaller share saves. Above
# them, the 256-wide MinAtar MLPs lost too (ppo_breakout_minatar 0.95x,
# pqn_breakout_minatar 0.88x; every gain was 64 wide), so on CPU a layer of WIDE_LAYER
# units or more (128: not measured, kept on one device) keeps an on-policy learner on
# one device. Off CPU nothing is measured here; the thresholds apply to every learner.
MIN_ROWS_PER_DEVICE = 256
MIN_STEPS_PER_DEVICE = 1024
WIDE_LAYER = 128


def learner_rows(config: Config) -> int:
    """Rows one gradient step computes at once, over all devices and seeds: its samples,
    or for a recurrent network the sequences it scans over (the scan's steps run one
    after another whatever the device count, so only its width splits)."""
    agent = config.agent
    recurrent = getattr(agent, "memory", "none") != "none"
    if getattr(type(agent), "DATA", "trajectory") == "replay":
        rows = config.replay.batch_size  # transitions, or R2D2's sequences
    elif recurrent:
        rows = config.env.num_envs // getattr(agent, "num_minibatches", 1)
    else:
        rows = config.batch_size // getattr(agent, "num_minibatches", 1)
    return rows * config.train.num_seeds


def _splits_over(config: Config, devices: int) -> bool:
    """Whether the run's batches (envs, minibatches, replay) divide over `devices`."""
    candidate = dataclasses.replace(
        config, pipeline=dataclasses.replace(config.pipeline, devices=devices))
    try:
        validate(candidate)
    except ConfigError:
        return False
    return True


def choose_devices(config: Config) -> tuple[int, str]:
    """(devices, why): `pipeline.devices` if set; with 0, all devices where a run must span
    them (several processes, split placement); on CPU, for a recurrent off-policy learner
    the most devices its batches split over, and one for a memoryless off-policy learner
    or an on-policy one with a layer of WIDE_LAYER units or more; else all devices where
    each one's share of a gradient step and of a tick is large enough
    (MIN_ROWS_PER_DEVICE, MIN_STEPS_PER_DEVICE), one where not."""
    available = _device_count()
    if config.pipeline.devices:
        return config.pipeline.devices, f"pipeline.devices={config.pipeline.devices}"
    if available == 1:
        return 1, "the only device"
    if _process_count() > 1:
        return available, "a run over several processes spans every device"
    if config.pipeline.placement == "split":
        return available, "split placement"
    if config.pipeline.placement == "auto" and _auto_split(config):
        return 2, "split placement: one CPU device acts, one learns"
    return _fused_devices(config, available)


def _fused_devices(config: Config, available: int) -> tuple[int, str]:
    """`choose_devices` for a fused run over up to `available` (> 1) devices."""
    force = f"(pipeline.devices={available} forces {available})"
    if _platform() == "cpu":
        if getattr(type(config.agent), "DATA", "trajectory") == "replay":
            if getattr(config.agent, "memory", "none") == "none":
                return 1, (f"one device: on CPU a memoryless off-policy learner stays on one "
                           f"(DQN, SAC and TD3 ran 0.5-0.95x split over two) {force}")
            for devices in range(available, 1, -1):
                if _splits_over(config, devices):
                    return devices, (f"data parallel over {devices} of {available} CPU "
                                     f"devices (a recurrent off-policy learner)")
            return 1, f"one device: the run's batches split over no more {force}"
        if max(getattr(config.agent, "hidden_sizes", ()) or (0,)) >= WIDE_LAYER:
            return 1, (f"one device: on CPU an on-policy learner with {WIDE_LAYER}-unit or "
                       f"wider layers stays on one (256-unit ones ran slower split) {force}")
    rows = learner_rows(config) // available
    steps = config.batch_size * config.train.num_seeds // available
    share = (f"{rows:,} rows per gradient step and {steps:,} env steps per tick on "
             f"each of {available} devices")
    if config.env.num_envs % available:
        return 1, f"{config.env.num_envs} envs do not split over {available} devices"
    if rows >= MIN_ROWS_PER_DEVICE and steps >= MIN_STEPS_PER_DEVICE:
        return available, f"data parallel: {share}"
    return 1, (f"one device: {share} would be below {MIN_ROWS_PER_DEVICE:,} and "
               f"{MIN_STEPS_PER_DEVICE:,}, where splitting pays {force}")


def _auto_split(config: Config) -> bool:
    """Whether `pipeline.placement=auto` splits the run: a memoryless on-policy MLP
    learner narrower than WIDE_LAYER at lag >= 1, one run in one process on CPU with two
    or more devices (none pinned), where a fused run would keep to one device. Its halves
    then overlap on two cores; measured on the 2-core CI class (README, Speed):
    ppo_cartpole at lag 1 split 1.2-1.4x fused on one device, impala_cartpole 1.24x.
    Not measured to pay, so fused: recurrent and wide learners (their update is 86-87%
    of a tick, so overlap bounds them under 1.1x, and the split exchanges whole
    trajectories each tick), and off-policy ones (their host-dispatched split measured
    0.8x)."""
    agent = config.agent
    return (config.pipeline.lag >= 1 and config.pipeline.devices == 0
            and getattr(type(agent), "DATA", "trajectory") == "trajectory"
            and getattr(agent, "memory", "none") == "none"
            and getattr(agent, "torso", "mlp") == "mlp"
            and max(getattr(agent, "hidden_sizes", ()) or (0,)) < WIDE_LAYER
            and config.train.num_seeds == 1 and _process_count() == 1
            and _platform() == "cpu" and _device_count() >= 2
            and _fused_devices(config, _device_count())[0] == 1)


def choose_placement(config: Config) -> tuple[str, str]:
    """(placement, why): `pipeline.placement` if fused or split; for auto, split where
    `_auto_split` says it pays, else fused."""
    if config.pipeline.placement != "auto":
        return config.pipeline.placement, f"pipeline.placement={config.pipeline.placement}"
    if _auto_split(config):
        return "split", ("split: lag >= 1 and a learner too small for data parallelism, so "
                         "the actor and the learner overlap on a CPU device each")
    return "fused", "fused: actor and learner share the devices"


def validate(config: Config) -> None:
    """Checks that span sections (shapes that must divide, budgets that must fit)."""
    require(config.num_updates >= 1, "train.total_steps", config.train.total_steps,
            f">= env.num_envs * pipeline.rollout_len = {config.batch_size}")
    devices = config.num_devices
    processes = _process_count()
    if config.pipeline.devices > _device_count():
        where = "local devices" if processes == 1 else f"devices over {processes} processes"
        raise ConfigError(f"pipeline.devices={config.pipeline.devices} but only "
                          f"{_device_count()} {where}")
    if processes > 1:  # the mesh spans every process (pipeline.make_mesh)
        if devices != _device_count():
            raise ConfigError(f"pipeline.devices={devices}: a run over {processes} processes "
                              f"uses all {_device_count()} devices (set 0)")
        if config.placement == "split":
            raise ConfigError("pipeline.placement=split runs in one process; use fused with "
                              "several processes")
    groups = [devices]
    if config.placement == "split":
        if config.pipeline.lag < 1:
            raise ConfigError("pipeline.placement=split needs pipeline.lag >= 1 (the actor and "
                              "the learner work on different trajectories)")
        if not 1 <= config.pipeline.actor_devices < devices:
            raise ConfigError(f"pipeline.placement=split needs 1 <= pipeline.actor_devices < "
                              f"{devices} devices, got {config.pipeline.actor_devices}")
        groups = [config.pipeline.actor_devices, devices - config.pipeline.actor_devices]
    for group in groups:
        if config.env.num_envs % group:
            raise ConfigError(f"env.num_envs={config.env.num_envs} does not split over {group} "
                              f"devices (set pipeline.devices or a multiple of {group} envs)")
    if config.train.num_seeds > 1 and config.placement == "split":
        raise ConfigError("train.num_seeds > 1 needs pipeline.placement=fused (the seeds are "
                          "vmapped inside one program)")
    if config.train.num_seeds > 1 and config.eval.every > 0:
        raise ConfigError("eval.every > 0 supports train.num_seeds=1 only (periodic "
                          "evaluation of seed-batched parameters is not built yet)")
    if getattr(config.agent, "DATA", "trajectory") == "replay":
        _validate_replay(config, groups[-1])  # the replay is split over the learner's devices
    check = getattr(config.agent, "check", None)
    if check is not None:
        check(config)


def _validate_replay(config: Config, devices: int) -> None:
    """An off-policy run: the replay splits over the learner's `devices` and holds at
    least one tick."""
    replay, pipeline = config.replay, config.pipeline
    for key in ("capacity", "batch_size"):
        value = getattr(replay, key)
        if value % devices:
            raise ConfigError(f"replay.{key}={value} does not split over {devices} devices "
                              f"(each device keeps its own replay; use a multiple of {devices})")
    if replay.capacity < config.batch_size:
        raise ConfigError(f"replay.capacity={replay.capacity} is smaller than one tick's "
                          f"env.num_envs * pipeline.rollout_len = {config.batch_size} steps")
    if pipeline.max_staleness != -1:
        raise ConfigError("pipeline.max_staleness applies to on-policy agents only; an "
                          "off-policy agent's data ages in the replay by design")


def _device_count() -> int:
    """Devices of every process: the mesh spans them all (one process: its own)."""
    import jax

    return jax.device_count()


def _platform() -> str:
    """The platform the run's devices are on ("cpu", "gpu", "tpu")."""
    import jax

    return jax.default_backend()


def _process_count() -> int:
    import jax

    return jax.process_count()
