"""The sections of a run config other than `agent`, each a frozen dataclass that checks
its own ranges in `__post_init__` (a one-line ConfigError naming the key).
`loader.Config` composes them; `config/agents.py` holds the agents' sections."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
from typing import Any

from jaxrl_async.errors import ConfigError, require

REPLAY_KINDS = ("prioritized", "uniform")
EVAL_MODES = ("greedy", "sample")
PRNG_IMPLS = ("auto", "philox4x32", "threefry2x32", "rbg", "unsafe_rbg")
WANDB_MODES = ("online", "offline", "disabled")
# What W&B itself takes in WANDB_MODE: ours and its aliases.
WANDB_ENV_MODES = (*WANDB_MODES, "shared", "dryrun", "run")
NAN_POLICIES = ("stop", "warn")
# Prefixes of env names stepped on the host by actor threads (`jaxrl_async/host/`).
HOST_SUITES = ("gymnasium", "envpool")


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    # A gymnax id, <suite>:<id>, a name given to envs.register, module.path:factory
    # (envs.make), or a host env, gymnasium:<id> or envpool:<task> (host/by_name.py).
    name: str = "CartPole-v1"
    num_envs: int = 4
    normalize_obs: bool = False
    # Keyword arguments of the env's constructor or factory (`env.kwargs.size=8`).
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Observation entries (indices into the last axis) zeroed for a partially observed
    # variant, e.g. [1, 3]: CartPole without its velocities (envs.MaskObservation).
    mask_obs: tuple[int, ...] = ()
    # Host envs: a run whose actors hand in no round for this long (an env's step that
    # never returns) ends in one line, exit 1, resumable from its last checkpoint
    # (host/stall.py); a warning comes at half of it. 0: never. The default is a hundred
    # times the slowest round of a shipped config on two cores (ppo_halfcheetah's actor,
    # about 6 s) and forty times the longest first round, compiles included
    # (ppo_atari_breakout's, 14 s).
    stall_seconds: float = 600.0

    def __post_init__(self):
        require(self.num_envs >= 1, "env.num_envs", self.num_envs, ">= 1")
        require(self.stall_seconds >= 0, "env.stall_seconds", self.stall_seconds, ">= 0 (0: never)")
        require(
            all(i >= 0 for i in self.mask_obs),
            "env.mask_obs",
            list(self.mask_obs),
            "indices >= 0 into the observation's last axis",
        )

    @property
    def host(self) -> bool:
        """Whether the env steps on the host (actor threads), not inside the program."""
        return self.name.partition(":")[0] in HOST_SUITES


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    rollout_len: int = 128
    # Updates between the parameters that act and the learner that consumes their data:
    # 0 is synchronous; L >= 1 double-buffers the trajectory and acts with a queue of the
    # last L parameter versions (see pipeline/program.py).
    lag: int = 0
    # Skip learner updates on data produced more than this many updates ago; -1: never.
    max_staleness: int = -1
    # Devices the env batch and the learner's batch are split over. 0: chosen per run
    # (`layout.choose_devices`): all of them where splitting pays, else one. With several
    # processes (`distributed`) the mesh spans every device of every process.
    devices: int = 0
    # "fused": actor and learner share every device, one program per host call.
    # "split": the first `actor_devices` devices act, the rest learn, and the host
    # dispatches both halves of each tick at once (needs lag >= 1 and 2+ devices).
    # "auto": split over one actor and one learner CPU device where that pays
    # (`layout.choose_placement`), else fused.
    placement: str = "auto"
    actor_devices: int = 1
    # lax.scan unroll of the rollout: fewer loop iterations on CPU, longer compile.
    unroll: int = 1
    # Host envs: actor threads, each stepping a slice of env.num_envs (host/executor.py),
    # its envs in env_groups groups whose policy calls overlap each other's env steps
    # (host/groups.py); with actor_processes each actor (its envs and its policy) runs
    # in a process of its own, off the learner's interpreter (host/actor_process.py).
    actor_threads: int = 1
    env_groups: int = 1
    actor_processes: bool = False

    def __post_init__(self):
        require(self.rollout_len >= 1, "pipeline.rollout_len", self.rollout_len, ">= 1")
        require(self.lag >= 0, "pipeline.lag", self.lag, ">= 0")
        require(
            self.max_staleness >= -1,
            "pipeline.max_staleness",
            self.max_staleness,
            ">= -1 (-1: no bound)",
        )
        require(self.unroll >= 1, "pipeline.unroll", self.unroll, ">= 1")
        require(self.devices >= 0, "pipeline.devices", self.devices, ">= 0 (0: choose)")
        require(
            self.placement in ("auto", "fused", "split"),
            "pipeline.placement",
            self.placement,
            "auto, fused or split",
        )
        require(self.actor_devices >= 1, "pipeline.actor_devices", self.actor_devices, ">= 1")
        require(self.actor_threads >= 1, "pipeline.actor_threads", self.actor_threads, ">= 1")
        require(self.env_groups >= 1, "pipeline.env_groups", self.env_groups, ">= 1")


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
    # lowers threefry on CPU as a rolled loop, slower in small rollouts: docs/performance.md;
    # on several devices philox compiles through sharding.lower_mulhi_on_meshes).
    # Set one explicitly for numbers that do not depend on the device count.
    prng: str = "auto"
    # Compile for bitwise run-to-run reproducibility on every backend (XLA's deterministic
    # GPU ops; CPU runs are deterministic anyway). See docs/operations.md#reproducibility.
    deterministic: bool = False
    # A non-finite loss, gradient norm or parameter: "stop" ends the run (exit 3, the last
    # finite checkpoint kept), "warn" says so once and trains on. docs/operations.md#divergence
    nan_policy: str = "stop"

    def __post_init__(self):
        require(self.total_steps >= 1, "train.total_steps", self.total_steps, ">= 1")
        require(self.seed >= 0, "train.seed", self.seed, ">= 0")
        require(self.num_seeds >= 1, "train.num_seeds", self.num_seeds, ">= 1")
        require(self.log_every >= 1, "train.log_every", self.log_every, ">= 1")
        require(self.prng in PRNG_IMPLS, "train.prng", self.prng, f"one of {PRNG_IMPLS}")
        require(
            self.nan_policy in NAN_POLICIES, "train.nan_policy", self.nan_policy, "stop or warn"
        )


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
    # Each evaluation's first episode also as a GIF in TensorBoard (and W&B): video/periodic.py.
    video: bool = False

    def __post_init__(self):
        require(self.every >= 0, "eval.every", self.every, ">= 0 (0: no evaluation)")
        require(self.episodes >= 1, "eval.episodes", self.episodes, ">= 1")
        require(self.mode in EVAL_MODES, "eval.mode", self.mode, f"one of {EVAL_MODES}")
        require(
            self.max_steps >= 0, "eval.max_steps", self.max_steps, ">= 0 (0: the env's own limit)"
        )
        require(
            not self.video or self.every > 0, "eval.video", self.video, "false without eval.every"
        )


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """How this session joins a multi-process run (`jax.distributed`); one process if unset.

    Launch settings, not part of the run: they stay out of the run directory's
    config.yaml, and a resume gives its own. Resolved against JAX's environment
    variables by `jaxrl_async.run.distributed`, which must run before any other JAX call.
    """

    coordinator: str = ""  # HOST:PORT of process 0; "": $JAX_COORDINATOR_ADDRESS
    num_processes: int = 0  # 0: $JAX_NUM_PROCESSES, else 1
    process_id: int = -1  # -1: $JAX_PROCESS_ID, else 0
    timeout: int = 300  # seconds to wait for every process to join

    def __post_init__(self):
        address = self.coordinator == "" or re.fullmatch(r"\S+:\d+", self.coordinator)
        require(bool(address), "distributed.coordinator", self.coordinator, "HOST:PORT")
        require(
            self.num_processes >= 0,
            "distributed.num_processes",
            self.num_processes,
            ">= 0 (0: from the environment)",
        )
        require(
            self.process_id >= -1,
            "distributed.process_id",
            self.process_id,
            ">= 0 (-1: from the environment)",
        )
        require(self.timeout >= 1, "distributed.timeout", self.timeout, ">= 1")


@dataclasses.dataclass(frozen=True)
class LoggerConfig:
    """Trackers a run logs to besides metrics.jsonl and TensorBoard, which it always writes.

    Weights & Biases (`pip install 'jaxrl_async[wandb]'`, `run/tracking.py`): one W&B run per
    run directory (per point of a sweep), with the resolved config, every log record at its
    env step and the summary; its id is kept in RUN_DIR/wandb.json, so a resume continues it.
    A key left empty is W&B's to decide, through its own environment variable (WANDB_MODE,
    WANDB_PROJECT, ...); a key set here wins over the variable (`tracking.wandb_init_args`).
    """

    wandb: bool = False
    wandb_project: str = ""  # "": WANDB_PROJECT, else "jaxrl_async"
    wandb_entity: str = ""  # "": WANDB_ENTITY, else the account's default entity
    wandb_group: str = ""  # "": WANDB_RUN_GROUP, else the config's name (a sweep's: its dir's)
    wandb_tags: tuple[str, ...] = ()  # (): WANDB_TAGS (comma-separated), else none
    wandb_mode: str = ""  # "": WANDB_MODE, else "online"; or "offline" (`wandb sync`), "disabled"

    def __post_init__(self):
        require(
            self.wandb_mode in ("", *WANDB_MODES),
            "logger.wandb_mode",
            self.wandb_mode,
            "online, offline or disabled (empty: WANDB_MODE decides)",
        )
        if self.wandb and not installed("wandb"):
            raise ConfigError("logger.wandb=true needs wandb: pip install 'jaxrl_async[wandb]'")
        # W&B reads WANDB_MODE even where the config sets the mode, and fails on a value
        # it does not take.
        env_mode = os.environ.get("WANDB_MODE", "")
        if self.wandb and env_mode not in ("", *WANDB_ENV_MODES):
            raise ConfigError(
                f"WANDB_MODE must be one of {', '.join(WANDB_ENV_MODES)}, got {env_mode!r}"
            )


def installed(module: str) -> bool:
    """Whether `module` can be imported (found without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules holds None (import blocked)
        return False
