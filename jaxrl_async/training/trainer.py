"""`train(config)`: one run loop over the engine the config picks (`engine.py`).

`train` runs five parts, the same for a JAX env and a host env:
  plan:      the layout, ticks per host call, host calls, where a resume starts
             (plan.py; a host run's calls are rounds: `plan_host`);
  engine:    `make_engine`, the one place that builds ProgramEngine (program_engine.py:
             the compiled XLA pipeline) or HostEngine (host_engine.py: actor threads);
  start:     the engine compiles and inits its state, or restores a checkpoint's;
  run_loop (loop.py): advance the engine a host call at a time, and between calls log
             (log.py), evaluate, checkpoint, stop on Ctrl-C (interrupts.py);
  summarize: the RunSummary (summary.json; summary.py writes it and the closing line).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import jax

from jaxrl_async._xla_flags import host_cpu_dispatch
from jaxrl_async.config.loader import Config
from jaxrl_async.errors import UserError
from jaxrl_async.run import distributed, rundir
from jaxrl_async.run.compile_cache import configure_compile_cache
from jaxrl_async.training.engine import Engine, engine_kind
from jaxrl_async.training.hparams import RunGroup
from jaxrl_async.training.log import Point, RunLog
from jaxrl_async.training.loop import LoopTimes, Run, run_loop
from jaxrl_async.training.plan import RunPlan, plan_host, plan_run
from jaxrl_async.training.program_engine import ProgramEngine
from jaxrl_async.training.result import TrainResult
from jaxrl_async.training.summary import RunSummary, write_summary

__all__ = ["Point", "RunGroup", "TrainResult", "build", "resume", "train"]


def make_engine(
    config: Config,
    plan: RunPlan,
    env=None,
    env_params=None,
    group: RunGroup | None = None,
) -> Engine:
    """The engine that trains `config` (`engine.engine_kind`), built for `plan`: checked
    against the machine, nothing written yet."""
    if engine_kind(config, env) == "jax":
        return ProgramEngine(config, plan, env, env_params, group)
    from jaxrl_async.training.host_engine import HostEngine

    return HostEngine(config, plan, group)


def make_plan(config: Config, run_dir: Path | None, resume: bool, env=None) -> RunPlan:
    """The run's plan, for the engine that trains it: a JAX run's calls are chunks of
    ticks sized to train.log_every, a host run's are rounds (`plan_host`)."""
    if engine_kind(config, env) == "host":
        return plan_host(config, run_dir, resume)
    return plan_run(config, run_dir, resume)


def build(config: Config, plan: RunPlan, env=None, env_params=None) -> ProgramEngine:
    """A JAX env's engine, built (its pipelines, agent and devices) and not started:
    what `plan` and the CUDA export inspect."""
    return ProgramEngine(config, plan, env, env_params)


def summarize(
    run: Run, log: RunLog, times: LoopTimes, state, env_name: str, wall_start: float
) -> RunSummary:
    """The run's RunSummary (summary.json): the common fields, then the engine's own."""
    config, plan, engine, records = run.config, run.plan, run.engine, log.records
    num_seeds, evaluation = config.train.num_seeds, engine.evaluation
    eval_seconds = 0.0 if evaluation is None else evaluation.seconds
    untimed = engine.untimed()
    trained = plan.num_updates * plan.batch - plan.start_call * plan.steps_per_call
    timed = times.loop_seconds - eval_seconds - times.checkpoint_seconds - untimed.seconds
    returns = [r["episode_return"] for r in records if math.isfinite(r["episode_return"])]
    return RunSummary(
        engine=engine.kind,
        config=config.name,
        env=env_name,
        agent=config.agent.name,
        seed=config.train.seed,
        env_steps=plan.num_updates * plan.batch,
        # Env steps of all seeds per second of the loop, what it spent not training left out.
        sps=num_seeds * (trained - untimed.steps) / timed if timed > 0 else math.nan,
        num_seeds=num_seeds,
        resumed_from=None if plan.point is None else plan.point.step,
        final_return=returns[-1] if returns else None,  # the mean over seeds
        final_return_seeds=[
            _last_finite(records, f"episode_return/seed{k}") for k in range(num_seeds)
        ]
        if num_seeds > 1
        else None,
        compile_seconds=engine.compile_seconds,
        checkpoint_seconds=times.checkpoint_seconds,
        eval_return_mean=None
        if evaluation is None
        else _last_finite(records[-1:], "eval_return_mean"),
        eval_seconds=eval_seconds,
        eval_compile_seconds=0.0 if evaluation is None else evaluation.compile_seconds,
        train_seconds=times.loop_seconds,
        wall_seconds=time.perf_counter() - wall_start,
        jax_version=jax.__version__,
        devices=[str(d) for d in engine.devices],
        placement=plan.layout.placement,
        processes=jax.process_count(),
        xla_flags=os.environ.get("XLA_FLAGS", ""),
        warnings=log.warnings,
        **engine.summary_fields(state),
    )


def _last_finite(records: list[dict], key: str):
    values = [r[key] for r in records if math.isfinite(r.get(key, math.nan))]
    return values[-1] if values else None


def train(
    config: Config,
    *,
    env=None,
    env_params=None,
    run_dir: str | Path | None = None,
    callbacks: Sequence[Callable[[dict], None]] = (),
    resume: bool = False,
    group: RunGroup | None = None,
) -> TrainResult:
    """Train `config` (on `env` if given: any gymnax-API env, or a Gymnasium env's id or
    factory, `lambda: MyEnv()`, stepped on the host by actor threads: `host_config`);
    write to `run_dir` if given.

    `resume=True` continues the run in `run_dir` from its latest checkpoint (the config
    may differ from the run's only in rundir.RESUMABLE keys; see `resume`).
    With a run directory, checkpoints go to RUN_DIR/checkpoints: every
    `checkpoint.every` env steps, at the end, and on Ctrl-C (or SIGTERM where a Python
    handler catches it, as in the CLI), which ends the run at the current host call's
    boundary with TrainingInterrupted. Returns a TrainResult; raises a UserError
    subclass on bad input before anything is written, a RunFailure of one line when an
    env fails while training. `group` trains the runs of a sweep group (RunGroup; `sweeps.py`).
    """
    env_name = config.env.name if env is None else type(env).__name__
    if env is not None:  # a Gymnasium env's id or factory goes to the host
        from jaxrl_async.host.by_name import host_config

        hosted = host_config(config, env)
        if hosted is not None:
            config, env, env_name = hosted, None, hosted.env.name
    if engine_kind(config, env) == "host":
        host_cpu_dispatch()  # before anything of the run starts JAX's CPU client
    wall_start = time.perf_counter()
    distributed.check(config.distributed)
    configure_compile_cache(config.train.compile_cache)
    run_dir = None if run_dir is None else Path(run_dir)
    plan = make_plan(config, run_dir, resume, env)
    engine = make_engine(config, plan, env, env_params, group)
    try:
        return _train(engine, run_dir, callbacks, group, env_name, wall_start)
    finally:
        engine.close()


def _train(
    engine: Engine,
    run_dir: Path | None,
    callbacks: Sequence[Callable[[dict], None]],
    group: RunGroup | None,
    env_name: str,
    wall_start: float,
) -> TrainResult:
    """The run on its built engine: its directory, start, loop and summary."""
    config, plan = engine.config, engine.plan
    # With several processes all run this in step; only process 0 writes or prints.
    main = distributed.is_main()
    if plan.point is None and run_dir is not None:  # a new run's directory
        _open_run_dir(config, run_dir, main)
    # Started (restored) before anything of a resumed run's directory is touched; the
    # engine warns (a stalling actor) through the log, made once the records are cut back.
    state = engine.start(run_dir, lambda line: log.warn(line))
    if plan.point is not None and main:
        assert run_dir is not None
        rundir.write_atomic(run_dir / "config.yaml", config.to_yaml())
        rundir.write_records(run_dir, plan.point.records)
    log = RunLog(config, plan, run_dir, callbacks, main, () if group is None else group.points)
    saver = rundir.checkpointer(run_dir, config.checkpoint.keep, write=main)
    run = Run(config, plan, engine, state, run_dir)
    # metrics.jsonl or summary.json that cannot be written: one line, resumable.
    with rundir.naming_intact(run_dir if main else None):
        try:
            state, times = run_loop(run, log, saver)
        finally:
            log.close()
            if saver is not None:
                saver.close()
        summary = summarize(run, log, times, state, env_name, wall_start)
        return _finish(run, log, engine.result_state(state), summary, main, group)


def _open_run_dir(config: Config, run_dir: Path, main: bool) -> None:
    """A new run's directory, with its config.yaml; one that holds files is refused, by
    every process together (a process that raised alone would leave the others waiting),
    and one that cannot be written in one line."""
    if distributed.any_process(main and run_dir.exists() and any(run_dir.iterdir())):
        raise UserError(f"run directory {run_dir} exists and is not empty")
    if main:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            rundir.write_atomic(run_dir / "config.yaml", config.to_yaml())
        except OSError as e:  # a path through a file, a read-only or full disk
            raise UserError(f"cannot write run directory {run_dir}: {e.strerror or e}") from None


def _finish(
    run: Run, log: RunLog, state, summary: RunSummary, main: bool, group: RunGroup | None
) -> TrainResult:
    """Write summary.json (process 0), print the closing lines, return the TrainResult."""
    run_dir = run.run_dir if main else None  # the other processes wrote nothing
    # The layout's reasons (`jaxrl-async plan`), then the summary: the run's last line.
    fields = write_summary(summary, run_dir, log.progress.write, run.engine.closing_lines())
    return TrainResult(
        state=state,
        metrics=log.metrics(),
        summary=fields,
        run_dir=run_dir,
        point_records=None if group is None else log.point_records,
    )


def resume(
    run_dir: str | Path,
    overrides: Sequence[str] = (),
    *,
    env=None,
    env_params=None,
    callbacks: Sequence[Callable[[dict], None]] = (),
) -> TrainResult:
    """Continue the run in `run_dir` from its latest checkpoint, in the same directory.

    Reloads RUN_DIR/config.yaml; `overrides` may set only rundir.RESUMABLE keys. With
    the run's own total_steps the result (parameters, metrics but wall time and SPS)
    is bitwise that of the uninterrupted run. A larger `train.total_steps=N` extends
    the run by whole host calls of the same size; what depends on the run's length
    (PPO's annealed learning rate, replay's importance-weight exponent) then follows
    the N-step plan from the checkpoint on. metrics.jsonl is cut back to the
    checkpoint and appended to; summary.json is rewritten at the end.
    """
    config = rundir.resume_config(run_dir, overrides)
    return train(
        config, env=env, env_params=env_params, run_dir=run_dir, callbacks=callbacks, resume=True
    )
