"""The host loop: build, compile once, call the compiled chunk until done, log between calls."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import numpy as np

from jaxrl_async import envs as envs_lib
from jaxrl_async.agents import BuildContext, make_agent
from jaxrl_async.config import Config
from jaxrl_async.errors import UserError
from jaxrl_async.logging import JsonlSink, Progress, TensorBoardSink, emit
from jaxrl_async.split import init_and_compile_split, split_meshes
from jaxrl_async.pipeline import AXIS, init_and_compile, make_mesh, make_pipeline, plan_calls


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
    """One log record from the stacked [K] metrics of a chunk."""
    m = jax.device_get(chunk_metrics)
    episodes = int(np.sum(m.pop("episodes")))
    ret_sum = float(np.sum(m.pop("episode_return_sum")))
    len_sum = float(np.sum(m.pop("episode_length_sum")))
    record = {"env_steps": env_steps, "wall_seconds": wall, "sps": sps, "episodes": episodes,
              "episode_return": ret_sum / episodes if episodes else math.nan,
              "episode_length": len_sum / episodes if episodes else math.nan}
    record.update({k: float(np.max(v) if k.endswith("_max") else np.mean(v))
                   for k, v in m.items()})
    return record


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
          callbacks: Sequence[Callable[[dict], None]] = ()) -> TrainResult:
    """Train `config` (on `env` if given, any gymnax-API env); write to `run_dir` if given.

    Returns a TrainResult; raises a UserError subclass on bad input before anything
    is written.
    """
    start = time.perf_counter()
    configure_compile_cache(config.train.compile_cache)
    env_name = config.env.name if env is None else type(env).__name__
    batch = config.batch_size
    ticks, num_calls = plan_calls(config.num_updates, max(1, config.train.log_every // batch))
    num_updates = ticks * num_calls
    if config.pipeline.placement == "split":
        actor_mesh, learner_mesh = split_meshes(
            config.pipeline.devices or jax.local_device_count(), config.pipeline.actor_devices)
        pipeline, _ = build_pipeline(config, env, env_params, num_updates, actor_mesh)
        learner_pipeline, _ = build_pipeline(config, env, env_params, num_updates, learner_mesh)
        devices = [*actor_mesh.devices.flat, *learner_mesh.devices.flat]
    else:
        pipeline, _ = build_pipeline(config, env, env_params, num_updates)
        devices = list(pipeline.mesh.devices.flat)

    if run_dir is not None:
        run_dir = Path(run_dir)
        if run_dir.exists() and any(run_dir.iterdir()):
            raise UserError(f"run directory {run_dir} exists and is not empty")
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(config.to_yaml())

    compile_start = time.perf_counter()
    hits, misses = _CACHE.hits, _CACHE.misses
    key = jax.random.key(config.train.seed, impl=config.prng_impl)
    if config.pipeline.placement == "split":
        state, chunk = init_and_compile_split(pipeline, learner_pipeline, key, ticks)
    else:
        state, chunk = init_and_compile(pipeline, key, ticks)
    compile_seconds = time.perf_counter() - compile_start
    hits, misses = _CACHE.hits - hits, _CACHE.misses - misses

    sinks: list = list(callbacks)
    closers: list = []
    if run_dir is not None:
        for sink in (JsonlSink(run_dir / "metrics.jsonl"), TensorBoardSink(run_dir)):
            sinks.append(sink)
            closers.append(sink)
    progress = Progress(num_updates * batch, config.train.progress, desc=config.name)
    records: list[dict] = []

    loop_start = last_time = time.perf_counter()
    pending = None
    try:
        for call in range(num_calls + 1):
            if call < num_calls:
                state, metrics = chunk(state)  # dispatched; runs while we log the last one
            if pending is not None:
                done_calls, pending_metrics = pending
                jax.block_until_ready(pending_metrics)
                now = time.perf_counter()
                steps = done_calls * ticks * batch
                record = _aggregate(pending_metrics, steps, now - loop_start,
                                    ticks * batch / max(now - last_time, 1e-9))
                last_time = now
                records.append(record)
                emit(sinks, record)
                progress.update(record)
            pending = (call + 1, metrics) if call < num_calls else None
        jax.block_until_ready(state)
    finally:
        progress.close()
        for closer in closers:
            closer.close()
    loop_seconds = time.perf_counter() - loop_start

    env_steps = num_updates * batch
    returns = [r["episode_return"] for r in records if math.isfinite(r["episode_return"])]
    summary = {
        "config": config.name,
        "env": env_name,
        "agent": config.agent.name,
        "seed": config.train.seed,
        "env_steps": env_steps,
        "updates": num_updates,
        "sps": env_steps / loop_seconds,
        "final_return": returns[-1] if returns else None,
        "compile_seconds": compile_seconds,
        "compile_cache_hits": hits,
        "compile_cache_misses": misses,
        "train_seconds": loop_seconds,
        "wall_seconds": time.perf_counter() - start,
        "jax_version": jax.__version__,
        "devices": [str(d) for d in devices],
        "placement": config.pipeline.placement,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }
    if run_dir is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    final = "-" if summary["final_return"] is None else f"{summary['final_return']:.1f}"
    progress.write(f"{config.name}: {env_steps:,} steps in {summary['wall_seconds']:.1f}s "
                   f"(compile {compile_seconds:.1f}s), {summary['sps']:,.0f} SPS, "
                   f"final return {final}" + (f" -> {run_dir}" if run_dir else ""))
    metrics = {k: np.asarray([r[k] for r in records]) for k in (records[0] if records else {})}
    return TrainResult(state=state, metrics=metrics, summary=summary, run_dir=run_dir)
