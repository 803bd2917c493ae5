#!/usr/bin/env python
"""The cost of the divergence check: training SPS with it against the same run without.

With the check (as shipped) each tick also reports the learner's `param_abs_max` and the
host checks every host call's metrics (run/divergence.py). Without it, the chunk scans the
bare tick and the host checks nothing. The two run alternately in this process, each
config `--runs` times per variant, from the persistent compile cache (SPS leaves compile
out); the table gives each variant's SPS and the ratio of each pair, as median
[min–max].

`--chunk` times the two compiled chunks alone instead, one call of each in turn
(`--runs` pairs), from the same state: the training program without the host loop,
its pairs closer together in time than two whole runs.

    flock /tmp/cpu.lock .venv/bin/python scripts/bench_divergence_check.py --runs 5
    flock /tmp/cpu.lock .venv/bin/python scripts/bench_divergence_check.py --chunk --runs 40
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import jax

import jaxrl_async
from jaxrl_async.pipeline import program as pipeline
from jaxrl_async.pipeline.build import build_pipeline
from jaxrl_async.pipeline.program import compile_chunk
from jaxrl_async.run import divergence

CONFIGS = {"ppo_cartpole": 262_144, "dqn_cartpole": 65_536}


def spread(values, fmt="{:.3f}") -> str:
    low, mid, high = (fmt.format(f(values)) for f in (min, statistics.median, max))
    return f"{mid} [{low}–{high}]"


def bare_chunk(tick, num_ticks: int):
    """The chunk without the check's metric: K ticks scanned."""

    def chunk(state):
        return jax.lax.scan(lambda s, _: tick(s), state, None, length=num_ticks)

    return chunk


@contextlib.contextmanager
def unchecked():
    saved = pipeline.make_chunk, divergence.DivergenceGuard.check
    pipeline.make_chunk = bare_chunk
    divergence.DivergenceGuard.check = lambda self, calls, metrics: None
    try:
        yield
    finally:
        pipeline.make_chunk, divergence.DivergenceGuard.check = saved


def sps(name: str, steps: int, checked: bool) -> float:
    config = jaxrl_async.load_config(name, [f"train.total_steps={steps}", "train.progress=false"])
    with contextlib.nullcontext() if checked else unchecked():
        result = jaxrl_async.train(config)
    assert ("param_abs_max" in result.metrics) == checked
    return result.summary["sps"]


def chunk_seconds(name: str, runs: int) -> tuple[list[float], list[float]]:
    """Seconds a call of the checked and of the unchecked chunk takes, in turn."""
    config = jaxrl_async.load_config(name, ["train.progress=false"])
    ticks = max(1, config.train.log_every // config.batch_size)
    key = jax.random.key(config.train.seed, impl=config.prng_impl)
    programs, states = {}, {}
    for checked in (True, False):
        with contextlib.nullcontext() if checked else unchecked():
            built, _ = build_pipeline(config)
        states[checked] = jax.jit(built.init)(key)
        programs[checked] = compile_chunk(built.chunk(ticks), states[checked])
    times: dict[bool, list[float]] = {True: [], False: []}
    for i in range(runs + 1):
        for checked in (True, False) if i % 2 == 0 else (False, True):
            start = time.perf_counter()
            states[checked], metrics = programs[checked](states[checked])
            jax.block_until_ready((states[checked], metrics))
            if i:  # the first pair warms up
                times[checked].append(time.perf_counter() - start)
    return times[True], times[False]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--chunk", action="store_true", help="time the compiled chunks alone")
    args = parser.parse_args()
    if args.chunk:
        print("| config | ms a call checked | ms a call unchecked | checked / unchecked |")
        print("| --- | --- | --- | --- |")
        for name in CONFIGS:
            checked, bare = chunk_seconds(name, args.runs)
            checked, bare = [1e3 * t for t in checked], [1e3 * t for t in bare]
            ratios = [a / b for a, b in zip(checked, bare)]
            print(
                f"| {name} | {spread(checked, '{:.2f}')} | {spread(bare, '{:.2f}')} | "
                f"{spread(ratios)} |",
                flush=True,
            )
        return
    print("| config | steps | SPS checked | SPS unchecked | checked / unchecked |")
    print("| --- | --- | --- | --- | --- |")
    for name, steps in CONFIGS.items():
        sps(name, steps, True), sps(name, steps, False)  # fill the compile cache
        runs: dict[bool, list[float]] = {True: [], False: []}
        for i in range(args.runs):
            for checked in (True, False) if i % 2 == 0 else (False, True):
                runs[checked].append(sps(name, steps, checked))
        ratios = [a / b for a, b in zip(runs[True], runs[False])]
        print(
            f"| {name} | {steps:,} | {spread(runs[True], '{:,.0f}')} | "
            f"{spread(runs[False], '{:,.0f}')} | {spread(ratios)} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
