"""The host loop: plan, build, start (or restore), call the compiled chunk until done, sum up.

`train(config)` runs five parts:
  plan_run (plan.py): the layout, ticks per host call, host calls, where a resume starts;
  build:     the pipeline(s), the agent, the periodic evaluation;
  start:     compile, then init the state or restore it from a checkpoint;
  run_loop (loop.py): call the chunk, and between calls log (log.py), evaluate,
             checkpoint, stop on Ctrl-C (interrupts.py);
  summarize: the RunSummary (summary.json; summary.py writes it and the closing line).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import jax
import numpy as np

from jaxrl_async.config.loader import Config
from jaxrl_async.errors import UserError
from jaxrl_async.evaluation.evaluate import Evaluation
from jaxrl_async.pipeline.build import build_pipeline
from jaxrl_async.pipeline.footprint import check_run_fits
from jaxrl_async.pipeline.program import (
    DETERMINISTIC_OPTIONS,
    compile_chunk,
    init_and_compile,
    seed_keys,
    vmap_seeds,
)
from jaxrl_async.pipeline.sharding import make_mesh
from jaxrl_async.pipeline.split import init_and_compile_split, split_meshes
from jaxrl_async.run import checkpoint as ckpt
from jaxrl_async.run import distributed, rundir
from jaxrl_async.run.compile_cache import CACHE, configure_compile_cache
from jaxrl_async.training.log import Point, RunLog
from jaxrl_async.training.loop import Built, LoopTimes, Run, Started, run_loop
from jaxrl_async.training.plan import RunPlan, plan_run
from jaxrl_async.training.result import TrainResult
from jaxrl_async.training.summary import RunSummary, write_summary

__all__ = ["Point", "RunGroup", "TrainResult", "resume", "train"]


@dataclasses.dataclass(frozen=True)
class RunGroup:
    """Runs that differ in seed and hyperparameter values but share one compiled program
    (a sweep's structural group, `sweep.py`): the config's train.num_seeds counts them all.

    Run k starts from key `seeds[k]` (a point's seeds repeat the single run's, so point p
    equals that run up to float rounding) and trains with `hparams[field][k]` for each
    swept field of the agent (its SWEEPABLE ones, traced values of the learner state).
    """

    seeds: tuple[int, ...]
    hparams: dict[str, tuple[float, ...]]
    points: tuple[Point, ...]


def build(config: Config, plan: RunPlan, env=None, env_params=None) -> Built:
    layout, learner_pipeline = plan.layout, None
    if layout.placement == "split":
        actor_mesh, learner_mesh = split_meshes(layout.devices, layout.actor_devices)
        pipeline, _ = build_pipeline(config, env, env_params, plan.num_updates, actor_mesh)
        learner_pipeline, agent = build_pipeline(
            config, env, env_params, plan.num_updates, learner_mesh
        )
        devices = [*actor_mesh.devices.flat, *learner_mesh.devices.flat]
    else:
        pipeline, agent = build_pipeline(
            config, env, env_params, plan.num_updates, make_mesh(layout.devices)
        )
        devices = list(pipeline.mesh.devices.flat)
        if config.train.num_seeds > 1:  # seeds side by side in one program
            pipeline = vmap_seeds(pipeline)
    # Evaluation of the learner's parameters on separate envs between host calls; its
    # own keys, so training does not change with it.
    evaluation = (
        _evaluation_class(config)(
            config, agent, env, env_params, device=devices[0] if jax.process_count() == 1 else None
        )
        if config.eval.every > 0
        else None
    )
    return Built(pipeline, learner_pipeline, agent, devices, evaluation)


def _evaluation_class(config: Config) -> type[Evaluation]:
    """Evaluation, or with eval.video the one that also records (video/periodic.py)."""
    if not config.eval.video:
        return Evaluation
    from jaxrl_async.evaluation.periodic import RecordingEvaluation

    return RecordingEvaluation


def start(
    config: Config, plan: RunPlan, built: Built, run_dir: Path | None, group: RunGroup | None = None
) -> Started:
    """Compile the chunk (and the evaluation, in a worker thread), then init the state,
    or restore it from the checkpoint of a resumed run into a fresh state's layout."""
    compile_start = time.perf_counter()
    hits, misses = CACHE.hits, CACHE.misses
    if built.evaluation is not None:
        built.evaluation.start_compile()  # in a worker thread, next to the training program
    options = DETERMINISTIC_OPTIONS if config.train.deterministic else None
    num_seeds = config.train.num_seeds
    key = (
        jax.random.key(config.train.seed, impl=config.prng_impl)
        if num_seeds == 1
        else seed_keys(
            config.train.seed, num_seeds, config.prng_impl, None if group is None else group.seeds
        )
    )
    restore_seconds = 0.0
    if plan.layout.placement == "split":
        state, chunk = init_and_compile_split(
            built.pipeline, built.learner_pipeline, key, plan.ticks, options
        )
    elif plan.point is None:
        state, chunk = init_and_compile(built.pipeline, key, plan.ticks, options)
        if group is not None:
            state = with_hparams(state, group.hparams)
    else:  # the checkpoint supplies the state: init is traced for its layout, never run
        state = jax.jit(built.pipeline.init).lower(key).out_info
    if plan.point is not None:
        assert run_dir is not None  # a resume point is read from the run directory
        # Into the layout and shardings of a fresh state; only then is the run dir touched.
        like, restore_start = state, time.perf_counter()
        state, _ = ckpt.restore(rundir.checkpoint_dir(run_dir), like, step=plan.point.step)
        restore_seconds = time.perf_counter() - restore_start
        if plan.layout.placement != "split":
            chunk = compile_chunk(built.pipeline.chunk(plan.ticks), like, options)
        if distributed.is_main():
            rundir.write_atomic(run_dir / "config.yaml", config.to_yaml())
            rundir.write_records(run_dir, plan.point.records)
    if built.evaluation is not None:
        built.evaluation.wait_compiled()
    return Started(
        state,
        chunk,
        time.perf_counter() - compile_start - restore_seconds,
        restore_seconds,
        CACHE.hits - hits,
        CACHE.misses - misses,
    )


def with_hparams(state, hparams: Mapping[str, Sequence[float]]):
    """`state` with the learner's hyperparameters set per run ([N] values a field), placed
    as the values they replace."""
    current = state.learner.hparams
    unknown = sorted(set(hparams) - set(current))
    if unknown:
        raise UserError(
            f"not sweepable: {', '.join(unknown)} (sweepable: {', '.join(sorted(current))})"
        )
    new = {
        k: jax.device_put(np.asarray(v, np.float32), current[k].sharding)
        for k, v in hparams.items()
    }
    return state.replace(learner=state.learner.replace(hparams={**current, **new}))


def summarize(
    run: Run, log: RunLog, times: LoopTimes, env_name: str, wall_start: float
) -> RunSummary:
    """The run's RunSummary (summary.json)."""
    config, plan, started, layout = run.config, run.plan, run.started, run.plan.layout
    records, evaluation = log.records, run.built.evaluation
    num_seeds = config.train.num_seeds
    eval_seconds = 0.0 if evaluation is None else evaluation.seconds
    env_steps = plan.num_updates * plan.batch
    returns = [r["episode_return"] for r in records if math.isfinite(r["episode_return"])]
    trained = env_steps - plan.start_call * plan.steps_per_call
    return RunSummary(
        engine="jax",
        config=config.name,
        env=env_name,
        agent=config.agent.name,
        seed=config.train.seed,
        env_steps=env_steps,
        updates=plan.num_updates,
        # Env steps of all seeds per second.
        sps=num_seeds * trained / (times.loop_seconds - eval_seconds - times.checkpoint_seconds),
        num_seeds=num_seeds,
        resumed_from=None if plan.point is None else plan.point.step,
        final_return=returns[-1] if returns else None,  # the mean over seeds
        final_return_seeds=[
            _last_finite(records, f"episode_return/seed{k}") for k in range(num_seeds)
        ]
        if num_seeds > 1
        else None,
        compile_seconds=started.compile_seconds,
        restore_seconds=started.restore_seconds,
        checkpoint_seconds=times.checkpoint_seconds,
        # Compiling the evaluation is in compile_seconds too.
        eval_return_mean=None
        if evaluation is None
        else _last_finite(records[-1:], "eval_return_mean"),
        eval_seconds=eval_seconds,
        eval_compile_seconds=0.0 if evaluation is None else evaluation.compile_seconds,
        compile_cache_hits=started.cache_hits,
        compile_cache_misses=started.cache_misses,
        train_seconds=times.loop_seconds,
        wall_seconds=time.perf_counter() - wall_start,
        jax_version=jax.__version__,
        devices=[str(d) for d in run.built.devices],
        device_choice=layout.devices_why,
        placement=layout.placement,
        placement_choice=layout.placement_why,
        processes=jax.process_count(),
        xla_flags=os.environ.get("XLA_FLAGS", ""),
        warnings=log.warnings,
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
    handler catches it, as in the CLI), which ends the run after the current host call
    with TrainingInterrupted.
    Returns a TrainResult; raises a UserError subclass on bad input before anything
    is written. `group` trains the runs of a sweep group (RunGroup; `sweep.py`).
    """
    if env is not None:  # a Gymnasium env's id or factory goes to the host
        from jaxrl_async.host.by_name import host_config

        hosted = host_config(config, env)
        if hosted is not None:
            config, env = hosted, None
    if env is None and config.env.host:  # stepped on the host by actor threads
        return _train_host(config, run_dir, callbacks, resume, group)
    wall_start = time.perf_counter()
    distributed.check(config.distributed)
    # With several processes all run this loop in step; only process 0 writes or prints.
    main = distributed.is_main()
    configure_compile_cache(config.train.compile_cache)
    run_dir = None if run_dir is None else Path(run_dir)
    plan = plan_run(config, run_dir, resume)
    built = build(config, plan, env, env_params)
    check_run_fits(config, (built.pipeline, built.learner_pipeline), built.devices)  # unallocated
    if plan.point is None and run_dir is not None:  # a new run's directory
        _open_run_dir(config, run_dir, main)
    run = Run(config, plan, built, start(config, plan, built, run_dir, group), run_dir)
    saver = rundir.checkpointer(run_dir, config.checkpoint.keep, write=main)
    log = RunLog(config, plan, run_dir, callbacks, main, () if group is None else group.points)
    # metrics.jsonl or summary.json that cannot be written: one line, resumable.
    with rundir.naming_intact(run_dir if main else None):
        try:
            state, times = run_loop(run, log, saver)
        finally:
            log.close()
            if saver is not None:
                saver.close()

        env_name = config.env.name if env is None else type(env).__name__
        summary = summarize(run, log, times, env_name, wall_start)
        return _finish(run, log, state, summary, main, group)


def _open_run_dir(config: Config, run_dir: Path, main: bool) -> None:
    """A new run's directory, with its config.yaml; one that holds files is refused, by
    every process together (a process that raised alone would leave the others waiting)."""
    if distributed.any_process(main and run_dir.exists() and any(run_dir.iterdir())):
        raise UserError(f"run directory {run_dir} exists and is not empty")
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
        rundir.write_atomic(run_dir / "config.yaml", config.to_yaml())


def _train_host(config: Config, run_dir, callbacks, resume: bool, group) -> TrainResult:
    if group is not None or jax.process_count() > 1:
        raise UserError(
            f"host env {config.env.name}: sweeps and several processes are not supported"
        )
    from jaxrl_async.training.host_run import train_host_run

    return train_host_run(config, run_dir=run_dir, callbacks=callbacks, resume=resume)


def _finish(
    run: Run, log: RunLog, state, summary: RunSummary, main: bool, group: RunGroup | None
) -> TrainResult:
    """Write summary.json (process 0), print the closing lines, return the TrainResult."""
    run_dir = run.run_dir if main else None  # the other processes wrote nothing
    # The layout's reasons (`jaxrl-async plan`), then the summary: the run's last line.
    fields = write_summary(summary, run_dir, log.progress.write, [run.plan.layout.line()])
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
