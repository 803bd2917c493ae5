"""A run's end, whichever engine trained it: `RunSummary`, the typed summary.json, and
`write_summary`, the one function that writes it (summary.json, W&B, the closing line).

`trainer.summarize` builds the RunSummary of either engine's run (the common fields by
one rule, then the engine's own, `Engine.summary_fields`) and `_finish` hands it to
`write_summary`. The fields common to both engines mean the same in both. A field only
one engine has (JAX_ONLY, HOST_ONLY) is None on the other's summary and is left out of
its summary.json and `TrainResult.summary`, so each engine writes the keys it wrote
before: a JAX run no `policy_lag`, a host run no `compile_cache_hits`. An engine's own
field that is None (a one-seed JAX run's `final_return_seeds`) is written as null, as a
common field's is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

from jaxrl_async.run import rundir, tracking

Engine = Literal["jax", "host"]


# A field only one engine's runs have: None (and not written) on the other's.
JAX_ONLY = {"engine": "jax"}
HOST_ONLY = {"engine": "host"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSummary:
    """summary.json: what a run (session) did, written at its end (`write_summary`)."""

    engine: Engine  # which engine trained the run (not written: its fields say it)
    config: str  # the config's name
    env: str
    agent: str
    seed: int
    env_steps: int  # all of the run's, this session's and earlier sessions'
    updates: int
    # This session's env steps (all seeds') per second of its training loop, evaluation
    # and blocking checkpoint saves left out, and a host run's first round (it compiles
    # the policy and the learner while it steps: compile_seconds).
    sps: float
    num_seeds: int
    resumed_from: int | None  # the checkpoint's env steps this session started from
    # The last logged mean episode return (mean over seeds); None where no episode ended.
    final_return: float | None
    # Per seed (a JAX run of several seeds), else None.
    final_return_seeds: list[float | None] | None = field(default=None, metadata=JAX_ONLY)
    compile_seconds: float
    restore_seconds: float | None = field(default=None, metadata=JAX_ONLY)  # reading the checkpoint
    # The loop blocked on checkpoint saves (in train_seconds, not in sps).
    checkpoint_seconds: float
    # The final evaluation's mean return (the last record's: a resume that only finishes
    # the run evaluates nothing), None without eval.every; evaluating took eval_seconds
    # (in train_seconds, not in sps), compiling its policy eval_compile_seconds (in
    # compile_seconds on a JAX run; on a host run, in train_seconds and not in sps).
    eval_return_mean: float | None
    eval_seconds: float
    eval_compile_seconds: float
    compile_cache_hits: int | None = field(default=None, metadata=JAX_ONLY)
    compile_cache_misses: int | None = field(default=None, metadata=JAX_ONLY)
    train_seconds: float  # the training loop's
    wall_seconds: float  # the whole session's
    jax_version: str
    devices: list[str]
    device_choice: str | None = field(
        default=None, metadata=JAX_ONLY
    )  # why these devices (`jaxrl-async plan`)
    placement: str
    placement_choice: str | None = field(default=None, metadata=JAX_ONLY)
    processes: int
    xla_flags: str
    warnings: list[str]  # this session's (train.nan_policy=warn's divergence)
    # The host engine's own (training/host_engine.py, host/executor.py).
    actor_threads: int | None = field(default=None, metadata=HOST_ONLY)
    # each actor in a process of its own (pipeline.actor_processes)
    actor_processes: bool | None = field(default=None, metadata=HOST_ONLY)
    lag: int | None = field(default=None, metadata=HOST_ONLY)  # pipeline.lag
    policy_lag: float | None = field(
        default=None, metadata=HOST_ONLY
    )  # mean updates between acting and learning
    policy_lag_max: float | None = field(default=None, metadata=HOST_ONLY)
    learner_wait_seconds: float | None = field(default=None, metadata=HOST_ONLY)
    learn_seconds: float | None = field(default=None, metadata=HOST_ONLY)
    actor_env_seconds: float | None = field(default=None, metadata=HOST_ONLY)
    actor_policy_seconds: float | None = field(default=None, metadata=HOST_ONLY)
    # of the policy's: dispatching its calls (the rest: waiting for their results)
    actor_dispatch_seconds: float | None = field(default=None, metadata=HOST_ONLY)
    # the actor's rounds in all: env, policy and its own work (the overlap bound's actor)
    actor_round_seconds: float | None = field(default=None, metadata=HOST_ONLY)
    # The CPU seconds of the run's processes (its actor processes too) per second of the
    # timed rounds, the cores it may use, and the SPS at which its CPU per step would fill
    # them (`host/round_times.py`): cores_busy near cores means the run is CPU-bound.
    cores_busy: float | None = field(default=None, metadata=HOST_ONLY)
    cores: int | None = field(default=None, metadata=HOST_ONLY)
    cpu_bound_sps: float | None = field(default=None, metadata=HOST_ONLY)

    def to_dict(self) -> dict[str, Any]:
        """summary.json's object (and `TrainResult.summary`): the common fields and this
        engine's own, in field order."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name != "engine" and f.metadata.get("engine", self.engine) == self.engine
        }

    def closing_line(self, run_dir: Path | None) -> str:
        """The run's last printed line."""
        final = "-" if self.final_return is None else f"{self.final_return:.1f}"
        compiled = f" (compile {self.compile_seconds:.1f}s)" if self.engine == "jax" else ""
        lag = f"policy lag {self.policy_lag:.2f}, " if self.policy_lag is not None else ""
        return (
            f"{self.config}: {self.env_steps:,} steps in {self.wall_seconds:.1f}s{compiled}, "
            f"{self.sps:,.0f} SPS, {lag}final return {final}"
            + (f" -> {run_dir}" if run_dir else "")
        )


def summary_fields(engine: Engine) -> list[str]:
    """The keys of `engine`'s summary.json, in order."""
    return [
        f.name
        for f in dataclasses.fields(RunSummary)
        if f.name != "engine" and f.metadata.get("engine", engine) == engine
    ]


def write_summary(
    summary: RunSummary,
    run_dir: Path | None,
    write: Callable[[str], None],
    before: Sequence[str] = (),
) -> dict[str, Any]:
    """End a run: summary.json (with a run directory) and its W&B run's summary, then the
    lines `before` and the closing line through `write`. Returns summary.json's dict."""
    fields = summary.to_dict()
    if run_dir is not None:
        rundir.write_summary(run_dir, fields)
        tracking.finish(run_dir, fields)
    for line in before:
        write(line)
    write(summary.closing_line(run_dir))
    return fields
