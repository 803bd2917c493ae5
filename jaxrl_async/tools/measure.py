"""The bench's measurements: timed loops of compiled programs and of `train()`, each
repeated, reported as median with min and max (`spread`), with the machine they ran on."""

from __future__ import annotations

import math
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxrl_async._xla_flags import SCHEDULER_FLAG
from jaxrl_async.config.loader import Config
from jaxrl_async.pipeline.build import build_pipeline
from jaxrl_async.run.compile_cache import configure_compile_cache
from jaxrl_async.training.trainer import train

_START = time.perf_counter()
_LABEL = [""]  # the bench's --label, set once by its command (`set_label`)


def set_label(label: str) -> None:
    _LABEL[0] = label


def log(message: str) -> None:
    """A progress line on stderr, so a long bench shows it is alive."""
    label = _LABEL[0]
    prefix = f"[bench{' ' + label if label else ''} {time.perf_counter() - _START:6.1f}s]"
    print(f"{prefix} {message}", file=sys.stderr, flush=True)


def scheduler_setting(flags: str) -> str | None:
    """'true'/'false' as XLA_FLAGS sets the concurrency-optimized scheduler (last wins), or None."""
    found = re.findall(re.escape(SCHEDULER_FLAG) + r"=(\w+)", flags)
    return found[-1].lower() if found else None


def with_scheduler(flags: str, value: str) -> str:
    kept = re.sub(re.escape(SCHEDULER_FLAG) + r"(=\S*)?", "", flags).split()
    return " ".join([*kept, f"{SCHEDULER_FLAG}={value}"])


def machine_info() -> dict:
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    flags = os.environ.get("XLA_FLAGS", "")
    return {
        "jax_version": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
        "xla_flags": flags,
        "scheduler": scheduler_setting(flags) or "xla default",
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "python": sys.version.split()[0],
    }


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


class CalibratedLoop(NamedTuple):
    """A body looped on device (`calibrated_loop`)."""

    timed: Callable[[], float]  # runs `iterations` of the body, returns their wall time
    iterations: int  # sized so that one timed call takes about the asked seconds
    compile_seconds: float
    carry: Callable[[], Any]  # the carry as the last call left it


def calibrated_loop(body, carry, seconds: float) -> CalibratedLoop:
    """`body` (carry -> carry) looped on device in one compiled program with its carry
    donated, its iterations per call sized to take about `seconds`.

    The iteration count is an argument, not a shape: one compile serves calibration and
    timing."""

    def run(carry, iterations):
        return jax.lax.fori_loop(0, iterations, lambda _, c: body(c), carry)

    start = time.perf_counter()
    compiled = jax.jit(run, donate_argnums=0).lower(carry, np.int32(1)).compile()
    compile_seconds = time.perf_counter() - start

    def timed(iterations: int) -> float:
        nonlocal carry
        start = time.perf_counter()
        carry = jax.block_until_ready(compiled(carry, np.int32(iterations)))
        return time.perf_counter() - start

    timed(1)  # first call allocates
    iterations, elapsed = 1, timed(1)
    while elapsed < seconds / 5:  # calibrate on a fifth of the budget, then size the timed calls
        iterations = max(2 * iterations, math.ceil(iterations * seconds / 5 / max(elapsed, 1e-6)))
        elapsed = timed(iterations)
    iterations = max(1, round(iterations * seconds / elapsed))

    def timed_calls() -> float:
        return timed(iterations)

    return CalibratedLoop(timed_calls, iterations, compile_seconds, lambda: carry)


def _timed_loop(body, carry, seconds: float, repeats: int, steps_per_iteration: int) -> dict:
    """Env steps per second of `body` (carry -> carry, `steps_per_iteration` env steps)
    looped on device (`calibrated_loop`), compile excluded."""
    loop = calibrated_loop(body, carry, seconds)
    steps = loop.iterations * steps_per_iteration
    times = [loop.timed() for _ in range(repeats)]
    return {
        "sps": [steps / t for t in times],
        "seconds": times,
        "iterations_per_call": loop.iterations,
        "env_steps_per_call": steps,
        "compile_seconds": loop.compile_seconds,
        "carry": loop.carry(),
    }


def measure_ceiling(config: Config, seconds: float, repeats: int) -> dict:
    """Env steps per second of `pipeline.rollout` alone (env steps and the policy's forward
    pass), looped on device, compile excluded."""
    configure_compile_cache(config.train.compile_cache)
    num_envs, rollout_len = config.env.num_envs, config.pipeline.rollout_len
    pipeline, _ = build_pipeline(config)

    def body(carry):
        env_state, obs, memory, key, episodes, params = carry
        key, rollout_key = jax.random.split(key)
        env_state, obs, memory, _, stats = pipeline.rollout(
            params, env_state, obs, memory, rollout_key
        )
        return env_state, obs, memory, key, episodes + stats["episodes"], params

    start = time.perf_counter()
    key = jax.random.key(config.train.seed, impl=config.prng_impl)
    state = jax.block_until_ready(jax.jit(pipeline.init)(key))
    init_seconds = time.perf_counter() - start
    carry = (
        state.env_state,
        state.obs,
        state.memory,
        state.key,
        jax.numpy.int32(0),
        state.learner.params,
    )
    out = _timed_loop(body, carry, seconds, repeats, rollout_len * num_envs)
    episodes = int(out.pop("carry")[4])
    return {
        **out,
        "rollouts_per_call": out["iterations_per_call"],
        "init_seconds": init_seconds,  # compiling and running pipeline.init
        "episodes": episodes,
    }


def measure_env_only(config: Config, seconds: float, repeats: int, direct: bool = False) -> dict:
    """Env steps per second of the env alone under uniformly random actions, looped on
    device: as the trainer steps it (adapter, episode statistics, vmap), or with
    `direct`, the suite's own API vmapped (the adapter's `direct`), for the overhead of
    the adapter. Both draw their actions from the adapter's action space."""
    from jaxrl_async import envs as envs_lib

    configure_compile_cache(config.train.compile_cache)
    num_envs, steps = config.env.num_envs, config.pipeline.rollout_len
    env, params = envs_lib.resolve(config.env)
    space = env.action_space(params)
    sample = jax.vmap(space.sample)
    split = jax.vmap(jax.random.split)
    if direct:
        suite, _, env_id = config.env.name.partition(":")
        reset_one, step_one = envs_lib.suites.adapter(suite).direct(env_id, **config.env.kwargs)
        reset, step = jax.vmap(reset_one), jax.vmap(step_one)
    else:
        batched = envs_lib.make_batched(env)
        reset = lambda keys: batched.reset(keys, params)[1]  # noqa: E731
        step = lambda keys, state, action: batched.step(keys, state, action, params)[1]  # noqa: E731

    def body(carry):
        def one(_, carry):
            state, keys = carry
            keys = split(keys)
            action_keys, step_keys = keys[:, 0], keys[:, 1]
            return step(step_keys, state, sample(action_keys)), action_keys

        return jax.lax.fori_loop(0, steps, one, carry)

    keys = jax.random.split(jax.random.key(config.train.seed), num_envs)
    carry = (jax.jit(reset)(keys), keys)
    out = _timed_loop(body, carry, seconds, repeats, steps * num_envs)
    out.pop("carry")
    return out


class TrainBudget(NamedTuple):
    """How long `measure_train` trains: about `seconds` a run (at least `min_updates`, or
    exactly `updates` when set), `repeats` runs."""

    seconds: float
    repeats: int
    min_updates: int
    updates: int | None


def measure_train(make_config, num_envs: int, budget: TrainBudget, sps_guess: float) -> dict:
    """`train()` SPS; the number of updates is sized so one run trains for about `seconds`.

    A run far off that target (the guess was wrong) resizes the next and is kept
    only in `discarded`; the kept runs all have the same number of updates.
    """
    seconds, repeats, min_updates, updates = budget
    probe = make_config(num_envs, 1 << 40)
    batch = probe.batch_size
    # Whole host calls, as train() groups them, so no run ends up with one update per call.
    ticks = max(1, probe.train.log_every // batch)

    def size(sps: float) -> int:
        n = max(min_updates, round(seconds * sps / batch))
        return n if n <= ticks else max(ticks, round(n / ticks) * ticks)

    n = updates or size(sps_guess)
    runs: list[dict] = []
    discarded: list[dict] = []
    while len(runs) < repeats:
        log(f"envs={num_envs}: train {n} updates ({n * batch:,} steps)")
        summary = train(make_config(num_envs, n * batch), run_dir=None).summary
        run = {
            key: summary[key]
            for key in (
                "sps",
                "compile_seconds",
                "train_seconds",
                "updates",
                "env_steps",
                "final_return",
            )
        }
        log(
            f"envs={num_envs}: train {summary['sps']:,.0f} SPS in {summary['train_seconds']:.2f}s"
            f" (compile {summary['compile_seconds']:.2f}s)"
        )
        resized = size(summary["sps"])
        off_target = not seconds / 2 <= summary["train_seconds"] <= 2 * seconds
        if updates is None and not runs and off_target and resized != n and len(discarded) < 3:
            discarded.append(run)
            n = resized
            continue
        runs.append(run)
    column = {key: [r[key] for r in runs] for key in ("sps", "compile_seconds", "train_seconds")}
    return {**column, "updates": n, "env_steps": n * batch, "runs": runs, "discarded": discarded}
