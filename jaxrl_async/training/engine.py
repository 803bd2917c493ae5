"""The engine a run's loop drives, and the one place that picks it.

A run is one loop (`loop.py`: progress, logs, TensorBoard and W&B, checkpoints and
resume, divergence, interrupts, the evaluation schedule, one typed summary) over one of
two engines, which differ only in where the env steps:

- `ProgramEngine` (`program_engine.py`): a JAX env, stepped inside the compiled XLA
  program, a host call a chunk of `plan.ticks` ticks, any lag, any mesh;
- `HostEngine` (`host_engine.py`): a host env (Gymnasium, EnvPool, Atari), stepped by
  actor threads that stream version-tagged rounds to the learner, a host call one round.

Both take the run's plan and give the loop the same things: a started state (fresh, or a
checkpoint's restored into a fresh state's layout), `advance` by one host call returning
its metrics, the pytree a checkpoint holds, an evaluation at a boundary, and the
engine's own summary fields. `engine_kind` (`config/loader.py`, below every user of
it) is the one place a config, and an `env=` given to `train`, chooses between them;
`train`, `plan`, `bench`, `eval`, `--video` and `sweep` ask it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from jaxrl_async.config.loader import Config, EngineKind, engine_kind
from jaxrl_async.training.plan import RunPlan

__all__ = ["Advanced", "Engine", "EngineKind", "Evaluator", "Untimed", "engine_kind"]


@dataclasses.dataclass(frozen=True)
class Advanced:
    """One host call's outcome: the state after it and its metrics (arrays [ticks, ...],
    seed-batched [N, ticks, ...]; a round's scalars on the host engine)."""

    state: Any
    metrics: Any


@dataclasses.dataclass(frozen=True)
class Untimed:
    """What a session's SPS leaves out beside evaluation and checkpoint saves: the env
    steps and seconds of work that is compiling (a host run's first round, which compiles
    the policy and the learner while it steps)."""

    steps: int = 0
    seconds: float = 0.0


class Evaluator(Protocol):
    """A periodic evaluation's times, for the summary."""

    seconds: float
    compile_seconds: float


class Engine(Protocol):
    """What the run loop asks of the engine that trains (see the module's docstring)."""

    @property
    def kind(self) -> EngineKind: ...

    @property
    def config(self) -> Config: ...

    @property
    def plan(self) -> RunPlan: ...

    @property
    def devices(self) -> list:
        """The run's devices: actors' and learner's."""
        ...

    @property
    def evaluation(self) -> Evaluator | None:
        """eval.every's evaluation, None without it."""
        ...

    @property
    def compile_seconds(self) -> float:
        """Starting's compiling (a host run: its first round, which compiles as it steps)."""
        ...

    @property
    def checkpoint_devices(self) -> int:
        """The device count a checkpoint's metadata keeps."""
        ...

    @property
    def on_interrupt(self) -> Callable[[], None] | None:
        """Called from the signal handler on Ctrl-C / SIGTERM, so an engine that waits
        (for actors' rounds) stops waiting; None where a host call is never waited on."""
        ...

    def start(self, run_dir: Path | None, warn: Callable[[str], None]) -> Any:
        """The run's first state: fresh, or the resume point's checkpoint restored;
        `warn(line)` shows a warning (the run log's)."""
        ...

    def advance(self, state) -> Advanced | None:
        """The next host call; None where the engine stopped before it was whole."""
        ...

    def checkpoint(self, state) -> Any:
        """The pytree a checkpoint of `state` holds."""
        ...

    def evaluate(self, state, env_steps: int) -> dict:
        """The eval fields of a record: the learner's parameters in `state` evaluated."""
        ...

    def untimed(self) -> Untimed:
        """What this session's SPS leaves out (`Untimed`)."""
        ...

    def result_state(self, state) -> Any:
        """What `TrainResult.state` holds of the final state (a host run: the learner's)."""
        ...

    def closing_lines(self) -> list[str]:
        """Lines printed before the summary's closing line."""
        ...

    def summary_fields(self, state) -> dict:
        """The RunSummary fields only this engine has, and its `updates`."""
        ...

    def close(self) -> None:
        """Release what the engine holds (threads, envs); re-raise a failure it saw."""
        ...
