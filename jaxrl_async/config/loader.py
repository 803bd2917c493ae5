"""Typed, frozen run configuration: YAML files, dotted overrides, validation.

A run config has the sections in `Config.SECTIONS` (`env`, `agent`, `pipeline`, `replay`,
`train`, `checkpoint`, `eval`, `logger`, `distributed`; their dataclasses are in `sections.py` and
`config/agents.py`). YAML and overrides are merged onto the dataclass schema by
OmegaConf, which rejects unknown keys and values of the wrong type; range checks live in
each section's `__post_init__`. Every failure is a `ConfigError` with a one-line message that
names the offending key.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Literal, cast

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from jaxrl_async.config.agent import AgentConfig
from jaxrl_async.config.agents import AGENT_CONFIGS
from jaxrl_async.config.host_devices import check_host_devices
from jaxrl_async.config.sections import (
    EVAL_MODES,
    PRNG_IMPLS,
    REPLAY_KINDS,
    CheckpointConfig,
    DistributedConfig,
    EnvConfig,
    EvalConfig,
    LoggerConfig,
    PipelineConfig,
    ReplayConfig,
    TrainConfig,
)
from jaxrl_async.errors import ConfigError, require

__all__ = [
    "EVAL_MODES",
    "PRNG_IMPLS",
    "REPLAY_KINDS",
    "CheckpointConfig",
    "Config",
    "DistributedConfig",
    "EnvConfig",
    "EvalConfig",
    "LoggerConfig",
    "PipelineConfig",
    "ReplayConfig",
    "TrainConfig",
    "available_configs",
    "load_config",
    "validate",
    "with_overrides",
]

CONFIG_DIR = Path(__file__).parent / "yaml"
_OVERRIDE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+=")


@dataclasses.dataclass(frozen=True)
class Config:
    name: str = "custom"
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    # One of AGENT_CONFIGS (a subclass of AgentConfig), chosen by agent.name
    agent: AgentConfig = dataclasses.field(default_factory=AgentConfig)
    pipeline: PipelineConfig = dataclasses.field(default_factory=PipelineConfig)
    replay: ReplayConfig = dataclasses.field(default_factory=ReplayConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    logger: LoggerConfig = dataclasses.field(default_factory=LoggerConfig)
    distributed: DistributedConfig = dataclasses.field(default_factory=DistributedConfig)

    SECTIONS: ClassVar[tuple[str, ...]] = (
        "env",
        "agent",
        "pipeline",
        "replay",
        "train",
        "checkpoint",
        "eval",
        "logger",
        "distributed",
    )

    @property
    def batch_size(self) -> int:
        """Env steps per update: one rollout of every env."""
        return self.env.num_envs * self.pipeline.rollout_len

    @property
    def num_updates(self) -> int:
        return self.train.total_steps // self.batch_size

    @property
    def prng_impl(self) -> str:
        """The PRNG implementation `train.prng` resolves to (the same on every machine)."""
        return "philox4x32" if self.train.prng == "auto" else self.train.prng

    def to_yaml(self) -> str:
        """The run's config; `distributed` (how this session was launched) is left out."""
        tree = cast(dict, OmegaConf.to_container(OmegaConf.structured(self)))
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
            f"unknown config {str(name_or_path)!r} (available: {', '.join(available_configs())})"
        )
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


def load_config(
    name_or_path: str | os.PathLike = "ppo_cartpole", overrides: Sequence[str] = ()
) -> Config:
    """Load a shipped config by name (or a YAML path) and apply `section.key=value` overrides."""
    path = _resolve(name_or_path)
    try:
        raw = OmegaConf.load(path)
    except Exception as e:  # noqa: BLE001  (YAML syntax errors come in many types)
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
        for key in layer:
            if key not in Config.SECTIONS and key != "name":
                raise ConfigError(
                    f"unknown config section {key!r} (sections: {', '.join(Config.SECTIONS)})"
                )

    agent_name = OmegaConf.select(dotlist, "agent.name", default=None) or OmegaConf.select(
        raw, "agent.name", default="ppo"
    )
    if agent_name not in AGENT_CONFIGS:
        raise ConfigError(f"unknown agent {agent_name!r} (available: {', '.join(AGENT_CONFIGS)})")
    agent_cls = AGENT_CONFIGS[agent_name]

    sections = {
        "env": EnvConfig,
        "agent": agent_cls,
        "pipeline": PipelineConfig,
        "replay": ReplayConfig,
        "train": TrainConfig,
        "checkpoint": CheckpointConfig,
        "eval": EvalConfig,
        "logger": LoggerConfig,
        "distributed": DistributedConfig,
    }
    for layer in (raw, dotlist):
        for key, cls in sections.items():
            if key in layer:
                _integral_floats_to_int(layer[key], cls)

    schema = OmegaConf.structured(Config(name=name, agent=agent_cls()))
    OmegaConf.set_readonly(schema, False)
    try:
        merged = OmegaConf.merge(schema, raw, dotlist)
        config = cast(Config, OmegaConf.to_object(merged))
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


def validate(config: Config) -> None:
    """Checks that span sections (shapes that must divide, budgets that must fit) and need
    no device; those that depend on the device count run when the layout is chosen
    (`layout.choose_layout`)."""
    require(
        config.num_updates >= 1,
        "train.total_steps",
        config.train.total_steps,
        f">= env.num_envs * pipeline.rollout_len = {config.batch_size}",
    )
    if config.pipeline.placement == "split":
        if config.pipeline.lag < 1:
            raise ConfigError(
                "pipeline.placement=split needs pipeline.lag >= 1 (the actor and "
                "the learner work on different trajectories)"
            )
        if config.train.num_seeds > 1:
            raise ConfigError(
                "train.num_seeds > 1 needs pipeline.placement=fused (the seeds "
                "are vmapped inside one program)"
            )
    if config.train.num_seeds > 1 and config.eval.every > 0:
        raise ConfigError(
            "eval.every > 0 supports train.num_seeds=1 only (periodic "
            "evaluation of seed-batched parameters is not built yet)"
        )
    if config.agent.off_policy:
        _validate_replay(config)
    if config.env.host:
        _validate_host(config)
    elif config.pipeline.actor_threads != 1 or config.pipeline.actor_processes:
        field = "actor_threads" if config.pipeline.actor_threads != 1 else "actor_processes"
        raise ConfigError(
            f"pipeline.{field} applies to host envs (env.name=gymnasium:<id> or "
            "envpool:<task>) only; "
            f"{config.env.name} steps inside the compiled program"
        )
    config.agent.check(config)


EngineKind = Literal["jax", "host"]


def engine_kind(config: Config, env=None) -> EngineKind:
    """The engine that runs `config` (`training/engine.py`), decided here alone: "host"
    (actor threads, `training/host_engine.py`) for an env.name of a host suite
    (gymnasium:<id>, envpool:<task>) when no JAX env object is given, else "jax" (the
    compiled pipeline, `training/program_engine.py`). `train`, `plan`, `bench`, `eval`,
    `eval --video` and `sweep` all ask it."""
    return "host" if env is None and config.env.host else "jax"


def _validate_host(config: Config) -> None:
    """What the host executor (host/executor.py) does not run, refused before anything
    starts."""
    env, pipeline = config.env, config.pipeline
    refusals = [
        (
            config.eval.video,
            "eval.video is not supported (the periodic evaluation's envs are not built to "
            "render); record a checkpoint's with `jaxrl-async eval RUN_DIR --video PATH`",
        ),
        (
            pipeline.actor_threads > env.num_envs,
            f"pipeline.actor_threads={pipeline.actor_threads} exceeds "
            f"env.num_envs={env.num_envs} (each thread steps at least one env)",
        ),
    ]
    for refused, why in refusals:
        if refused:
            raise ConfigError(f"host env {env.name}: {why}")
    check_host_devices(config)


def _validate_replay(config: Config) -> None:
    """An off-policy run: the replay holds at least one tick, and its data ages by design."""
    replay, pipeline = config.replay, config.pipeline
    if replay.capacity < config.batch_size:
        raise ConfigError(
            f"replay.capacity={replay.capacity} is smaller than one tick's "
            f"env.num_envs * pipeline.rollout_len = {config.batch_size} steps"
        )
    if pipeline.max_staleness != -1:
        raise ConfigError(
            "pipeline.max_staleness applies to on-policy agents only; an "
            "off-policy agent's data ages in the replay by design"
        )
