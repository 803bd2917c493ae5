"""The host loop: build, compile once, call the compiled chunk until done, log between calls."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import numpy as np

from jaxrl_async import checkpoint as ckpt
from jaxrl_async import distributed
from jaxrl_async import envs as envs_lib
from jaxrl_async import rundir
from jaxrl_async.agents import BuildContext, make_agent
from jaxrl_async.config import Config
from jaxrl_async.errors import TrainingInterrupted, UserError
from jaxrl_async.evaluate import NO_EVAL, Evaluation
from jaxrl_async.logging import JsonlSink, Progress, TensorBoardSink, emit
from jaxrl_async.split import init_and_compile_split, split_meshes
from jaxrl_async.pipeline import (AXIS, DETERMINISTIC_OPTIONS, compile_chunk, init_and_compile,
                                  make_mesh, make_pipeline, plan_calls, seed_keys, vmap_seeds)


@dataclasses.dataclass
class TrainResult:
    state: Any  # final PipelineState
    metrics: dict[str, np.ndarray]  # one entry per log point
    summary: dict
    run_dir: Path | None


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jaxrl_async" / "xla"


def configure_compile_cache(enabled: bool) -> None:
    """Persistent XLA cache so a second start of the same config skips compiling.

    JAX_COMPILATION_CACHE_DIR (read by JAX itself) wins over our default directory.
    """
    jax.config.update("jax_enable_compilation_cache", enabled)
    if not enabled:
        return
    if not jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", str(default_cache_dir()))
    # Our programs compile in about a second: cache them all, not only the slow ones.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


class _CacheCounter:
    """Counts persistent-cache hits and misses (JAX reports them as monitoring events)."""

    def __init__(self):
        self.hits = self.misses = 0
        jax.monitoring.register_event_listener(self._on_event)

    def _on_event(self, event: str, **kwargs) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            self.hits += 1
        elif event == "/jax/compilation_cache/cache_misses":
            self.misses += 1


_CACHE = _CacheCounter()


def default_run_dir(config: Config, root: str | Path = "runs") -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(root) / f"{config.name}-{stamp}"
    suffix = 1
    while path.exists():
        suffix += 1
        path = Path(root) / f"{config.name}-{stamp}-{suffix}"
    return path


def _aggregate(chunk_metrics: dict, env_steps: int, wall: float, sps: float) -> dict:
    """One log record from the stacked [K] (or, seed-batched, [N, K]) metrics of a chunk.

    With N seeds each seed's episode statistics are kept as `<name>/seed<k>` and the
    plain names hold their mean over seeds; other metrics are averaged over everything.
    """
    m = jax.device_get(chunk_metrics)
    per_seed = lambda x: np.atleast_2d(np.asarray(x, np.float64)).sum(-1)  # noqa: E731
    episodes = per_seed(m.pop("episodes"))
    ret_sum, len_sum = per_seed(m.pop("episode_return_sum")), per_seed(m.pop("episode_length_sum"))
    with np.errstate(invalid="ignore", divide="ignore"):
        returns = np.where(episodes > 0, ret_sum / episodes, np.nan)
        lengths = np.where(episodes > 0, len_sum / episodes, np.nan)
    record = {"env_steps": env_steps, "wall_seconds": wall, "sps": sps,
              "episodes": int(episodes.sum()),
              "episode_return": _mean_finite(returns), "episode_length": _mean_finite(lengths)}
    if len(episodes) > 1:
        for k, (ret, length) in enumerate(zip(returns, lengths)):
            record[f"episode_return/seed{k}"] = float(ret)
            record[f"episode_length/seed{k}"] = float(length)
    record.update({k: float(np.max(v) if k.endswith("_max") else np.mean(v))
                   for k, v in m.items()})
    return record


def _mean_finite(x) -> float:
    finite = np.asarray(x)[np.isfinite(x)]
    return float(finite.mean()) if finite.size else math.nan


def build_pipeline(config: Config, env=None, env_params=None, num_updates: int | None = None,
                   mesh=None):
    """(Pipeline, Agent) for `config`, on `env` if given (else `config.env.name`).

    Checks the env against its declared spaces first (EnvSpecError on a mismatch).
    `num_updates` sets the learning-rate schedule's length (default: the config's);
    `mesh` the devices (default: `pipeline.devices` of them).
    """
    if env is None:
        env, default_params = envs_lib.make(config.env.name)
    else:
        default_params = getattr(env, "default_params", None)
    env_params = default_params if env_params is None else env_params
    spec = envs_lib.check_env(env, env_params)
    mesh = make_mesh(config.pipeline.devices) if mesh is None else mesh
    agent = make_agent(config.agent, BuildContext(
        spec, config.env.num_envs, config.pipeline.rollout_len,
        config.num_updates if num_updates is None else num_updates, axis_name=AXIS))
    batched_env = envs_lib.make_batched(env, config.env.normalize_obs, axis_name=AXIS)
    pipeline = make_pipeline(agent, batched_env, env_params, config.pipeline.rollout_len,
                             config.env.num_envs, unroll=config.pipeline.unroll,
                             lag=config.pipeline.lag,
                             max_staleness=config.pipeline.max_staleness, mesh=mesh,
                             replay=config.replay,
                             total_steps=(config.num_updates if num_updates is None
                                          else num_updates) * config.batch_size)
    return pipeline, agent


def train(config: Config, *, env=None, env_params=None, run_dir: str | Path | None = None,
          callbacks: Sequence[Callable[[dict], None]] = (), resume: bool = False) -> TrainResult:
    """Train `config` (on `env` if given, any gymnax-API env); write to `run_dir` if given.

    `resume=True` continues the run in `run_dir` from its latest checkpoint (the config
    may differ from the run's only in rundir.RESUMABLE keys; see `resume`).
    With a run directory, checkpoints go to RUN_DIR/checkpoints: every
    `checkpoint.every` env steps, at the end, and on Ctrl-C (or SIGTERM where a Python
    handler catches it, as in the CLI), which ends the run after the current host call
    with TrainingInterrupted.
    Returns a TrainResult; raises a UserError subclass on bad input before anything
    is written.
    """
    start = time.perf_counter()
    distributed.check(config.distributed)
    # With several processes all run this loop in step; only process 0 writes or prints.
    main = distributed.is_main()
    configure_compile_cache(config.train.compile_cache)
    env_name = config.env.name if env is None else type(env).__name__
    batch = config.batch_size
    point = _resume_point(run_dir, config) if resume else None
    if point is None:
        ticks, num_calls = plan_calls(config.num_updates, max(1, config.train.log_every // batch))
    else:  # the same chunk of ticks as before; total_steps may add or drop host calls
        ticks, num_calls = point.ticks, config.num_updates // point.ticks
    start_call = 0 if point is None else point.calls
    num_updates = ticks * num_calls
    if config.pipeline.placement == "split":
        actor_mesh, learner_mesh = split_meshes(
            config.pipeline.devices or jax.local_device_count(), config.pipeline.actor_devices)
        pipeline, _ = build_pipeline(config, env, env_params, num_updates, actor_mesh)
        learner_pipeline, agent = build_pipeline(config, env, env_params, num_updates,
                                                 learner_mesh)
        devices = [*actor_mesh.devices.flat, *learner_mesh.devices.flat]
    else:
        pipeline, agent = build_pipeline(config, env, env_params, num_updates)
        devices = list(pipeline.mesh.devices.flat)
        if config.train.num_seeds > 1:  # seeds side by side in one program
            pipeline = vmap_seeds(pipeline)
    # Evaluation of the learner's parameters on separate envs between host calls; its
    # own keys, so training does not change with it.
    evaluation = (Evaluation(config, agent, env, env_params,
                             device=devices[0] if jax.process_count() == 1 else None)
                  if config.eval.every > 0 else None)

    run_dir = None if run_dir is None else Path(run_dir)
    fresh = run_dir is not None and point is None
    # Decided together: a process that raised alone would leave the others waiting.
    if fresh and distributed.any_process(main and run_dir.exists() and any(run_dir.iterdir())):
        raise UserError(f"run directory {run_dir} exists and is not empty")
    if fresh and main:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(config.to_yaml())

    compile_start = time.perf_counter()
    hits, misses = _CACHE.hits, _CACHE.misses
    if evaluation is not None:
        evaluation.start_compile()  # in a worker thread, next to the training program
    num_seeds = config.train.num_seeds
    options = DETERMINISTIC_OPTIONS if config.train.deterministic else None
    key = (jax.random.key(config.train.seed, impl=config.prng_impl) if num_seeds == 1
           else seed_keys(config.train.seed, num_seeds, config.prng_impl))
    if config.pipeline.placement == "split":
        state, chunk = init_and_compile_split(pipeline, learner_pipeline, key, ticks,
                                              options)
    elif point is None:
        state, chunk = init_and_compile(pipeline, key, ticks, options)
    else:  # the checkpoint supplies the state: init is traced for its layout, never run
        state = jax.jit(pipeline.init).lower(key).out_info
    restore_seconds = 0.0
    if point is not None:
        # Into the layout and shardings of a fresh state; only then is the run dir touched.
        like, restore_start = state, time.perf_counter()
        state, _ = ckpt.restore(rundir.checkpoint_dir(run_dir), like, step=point.step)
        restore_seconds = time.perf_counter() - restore_start
        if config.pipeline.placement != "split":
            chunk = compile_chunk(pipeline.chunk(ticks), like, options)
        if main:
            rundir.write_atomic(run_dir / "config.yaml", config.to_yaml())
            rundir.write_records(run_dir, point.records)
    if evaluation is not None:
        evaluation.wait_compiled()
    compile_seconds = time.perf_counter() - compile_start - restore_seconds
    hits, misses = _CACHE.hits - hits, _CACHE.misses - misses

    sinks: list = list(callbacks) if main else []
    closers: list = []
    if run_dir is not None and main:
        for sink in (JsonlSink(run_dir / "metrics.jsonl"),
                     TensorBoardSink(run_dir, None if point is None else point.step + 1)):
            sinks.append(sink)
            closers.append(sink)
    steps_per_call = ticks * batch
    progress = Progress(num_updates * batch, config.train.progress and main, desc=config.name,
                        initial=start_call * steps_per_call)
    records: list[dict] = [] if point is None else list(point.records)
    saver = None
    if run_dir is not None:
        saver = ckpt.Checkpointer(rundir.checkpoint_dir(run_dir), config.checkpoint.keep,
                                  write=main)
        closers.append(saver)
    saved = -1 if point is None else point.calls  # host calls in the newest checkpoint
    prior_seconds = 0.0 if point is None else point.train_seconds
    checkpoint_seconds = 0.0

    loop_start = last_time = time.perf_counter()
    pending = None  # (host calls done, their metrics), not logged yet
    evaluated = None  # the evaluation fields of the pending record

    def log_pending():
        nonlocal pending, last_time, evaluated
        if pending is None:
            return
        done_calls, pending_metrics = pending
        jax.block_until_ready(pending_metrics)
        now = time.perf_counter()
        record = _aggregate(pending_metrics, done_calls * steps_per_call,
                            prior_seconds + now - loop_start,
                            num_seeds * steps_per_call / max(now - last_time, 1e-9))
        last_time = now
        if evaluation is not None:  # every record has the eval keys (NaN, 0: not evaluated)
            record.update(evaluated or NO_EVAL)
            evaluated = None
        records.append(record)
        emit(sinks, record)
        progress.update(record)
        pending = None

    try:
        with _interrupts_between_calls() as interrupted:
            for call in range(start_call, num_calls + 1):
                stop = distributed.any_process(interrupted())  # all processes stop together
                if evaluation is not None and pending is not None and not stop and (
                        call == num_calls or _due(config.eval.every, call, steps_per_call)):
                    spent = evaluation.seconds
                    evaluated = evaluation(state, call * steps_per_call)
                    last_time += evaluation.seconds - spent  # not training time: out of SPS
                if stop or call == num_calls or _due(config.checkpoint.every, call,
                                                     steps_per_call):
                    log_pending()  # metrics.jsonl reaches the checkpoint's step first
                    if saver is not None and call > saved:
                        # Periodic saves finish writing in the background while training
                        # goes on; the last one (the end, or an interrupt) is waited for.
                        save_start = time.perf_counter()
                        saver.save(call * steps_per_call, state, _checkpoint_meta(
                            config, call, ticks, prior_seconds + save_start - loop_start),
                            wait=stop or call == num_calls)
                        blocked = time.perf_counter() - save_start
                        checkpoint_seconds += blocked
                        last_time += blocked  # not training time: out of SPS
                        saved = call
                if stop:
                    raise TrainingInterrupted(call * steps_per_call,
                                              run_dir if saved == call else None)
                if call == num_calls:
                    break
                state, metrics = chunk(state)  # dispatched; runs while we log the last one
                log_pending()
                pending = (call + 1, metrics)
        jax.block_until_ready(state)
    finally:
        progress.close()
        for closer in closers:
            closer.close()
    loop_seconds = time.perf_counter() - loop_start
    eval_seconds = 0.0 if evaluation is None else evaluation.seconds

    env_steps = num_updates * batch
    returns = [r["episode_return"] for r in records if math.isfinite(r["episode_return"])]
    summary = {
        "config": config.name,
        "env": env_name,
        "agent": config.agent.name,
        "seed": config.train.seed,
        "env_steps": env_steps,
        "updates": num_updates,
        # Env steps of all seeds per second.
        "sps": num_seeds * (env_steps - start_call * steps_per_call)
        / (loop_seconds - eval_seconds - checkpoint_seconds),
        "num_seeds": num_seeds,
        "resumed_from": None if point is None else point.step,
        "final_return": returns[-1] if returns else None,  # the mean over seeds
        "final_return_seeds": [_last_finite(records, f"episode_return/seed{k}")
                               for k in range(num_seeds)] if num_seeds > 1 else None,
        "compile_seconds": compile_seconds,
        "restore_seconds": restore_seconds,
        # The loop blocked on checkpoint saves (in train_seconds, not in sps).
        "checkpoint_seconds": checkpoint_seconds,
        # The final evaluation's mean return; evaluating took eval_seconds (in
        # train_seconds, not in sps) and compiling eval_compile_seconds (in compile_seconds).
        "eval_return_mean": None if evaluation is None or evaluation.last is None
        else evaluation.last["eval_return_mean"],
        "eval_seconds": eval_seconds,
        "eval_compile_seconds": 0.0 if evaluation is None else evaluation.compile_seconds,
        "compile_cache_hits": hits,
        "compile_cache_misses": misses,
        "train_seconds": loop_seconds,
        "wall_seconds": time.perf_counter() - start,
        "jax_version": jax.__version__,
        "devices": [str(d) for d in devices],
        "placement": config.pipeline.placement,
        "processes": jax.process_count(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }
    run_dir = run_dir if main else None  # the other processes wrote nothing
    if run_dir is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    final = "-" if summary["final_return"] is None else f"{summary['final_return']:.1f}"
    progress.write(f"{config.name}: {env_steps:,} steps in {summary['wall_seconds']:.1f}s "
                   f"(compile {compile_seconds:.1f}s), {summary['sps']:,.0f} SPS, "
                   f"final return {final}" + (f" -> {run_dir}" if run_dir else ""))
    metrics = {k: np.asarray([r[k] for r in records]) for k in (records[0] if records else {})}
    return TrainResult(state=state, metrics=metrics, summary=summary, run_dir=run_dir)


def resume(run_dir: str | Path, overrides: Sequence[str] = (), *, env=None, env_params=None,
           callbacks: Sequence[Callable[[dict], None]] = ()) -> TrainResult:
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
    return train(config, env=env, env_params=env_params, run_dir=run_dir, callbacks=callbacks,
                 resume=True)


def _last_finite(records: list[dict], key: str):
    values = [r[key] for r in records if math.isfinite(r.get(key, math.nan))]
    return values[-1] if values else None


def _resume_point(run_dir, config: Config) -> rundir.ResumePoint:
    if run_dir is None:
        raise UserError("resuming needs the run directory")
    point = rundir.resume_point(run_dir, config)
    if config.num_updates // point.ticks <= point.calls:
        per_call = point.ticks * config.batch_size
        raise UserError(f"nothing to resume: {run_dir} is checkpointed at {point.step:,} env "
                        f"steps and train.total_steps={config.train.total_steps} adds no host "
                        f"call of {per_call:,} steps (e.g. train.total_steps="
                        f"{point.step + per_call})")
    return point


def _due(every: int, call: int, steps_per_call: int) -> bool:
    """A periodic checkpoint at the first host-call boundary past each multiple of `every`."""
    return every > 0 and call > 0 and \
        call * steps_per_call // every > (call - 1) * steps_per_call // every


def _checkpoint_meta(config: Config, call: int, ticks: int, train_seconds: float) -> dict:
    return {"env_steps": call * ticks * config.batch_size, "calls": call, "ticks": ticks,
            "train_seconds": train_seconds, "prng_impl": config.prng_impl,
            "config": config.to_yaml(), "jax_version": jax.__version__}


@contextlib.contextmanager
def _interrupts_between_calls():
    """Yields `interrupted() -> bool`: SIGINT and SIGTERM set it instead of raising.

    Only signals a Python handler catches (Ctrl-C's default, the CLI's handlers) are
    deferred to the next host-call boundary, where the loop saves and stops; a second
    one goes to that handler at once. SIG_DFL / SIG_IGN are left alone, as is
    everything off the main thread.
    """
    received: list[int] = []
    previous = {}

    def handler(signum, frame):
        if received:
            previous[signum](signum, frame)
        received.append(signum)

    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            current = signal.getsignal(signum)
            if callable(current):
                previous[signum] = current
                signal.signal(signum, handler)
    try:
        yield lambda: bool(received)
    finally:
        for signum, current in previous.items():
            signal.signal(signum, current)
