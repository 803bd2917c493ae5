#!/usr/bin/env python
"""A sweep of N grid points as one program against the same N runs one by one.

For each N (default 1, 4, 16, 64) the grid is N learning rates of `--config` (log-spaced
between 1e-4 and 1e-3), one seed each; the sweep trains them with `jaxrl_async.sweep`,
the other side with N calls of `jaxrl_async.train`, one after another. Both are timed
from the first call to the last result, compile included, each in a fresh process with
an empty persistent compile cache of its own: the separate runs compile the first run's
program and load it from that cache for the others (their learning rates are traced
values, so they share one program), the most a user running them one by one could get.
With `--separate commands` the other side is instead N `jaxrl-async train` commands, one
fresh process each, one after another, sharing one persistent compile cache that starts
empty (what a shell loop over the values gets: the first command compiles, the others
load the program and pay the process's start, imports and set-up again).
The two sides alternate, `--repeats` times each; the table gives medians [min-max]:
wall seconds, runs per second, aggregate SPS (all runs' env steps over the wall time,
compile included) and the time ratio separate / sweep.

    python scripts/bench_sweep.py                         # ppo_cartpole, 1/4/16/64 points
    python scripts/bench_sweep.py --points 16 --repeats 3 --steps 131072
    python scripts/bench_sweep.py --points 16 --separate commands
    python scripts/bench_sweep.py --json sweep_bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

CHILD = """
import json, sys, time
import jaxrl_async

mode, name, points, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
base = ["train.progress=false", f"train.total_steps={steps}", f"train.log_every={steps}"]
rates = json.loads(sys.argv[5])
start = time.perf_counter()
if mode == "sweep":
    result = jaxrl_async.sweep(jaxrl_async.load_config(name, base),
                               {"agent.learning_rate": rates})
    finals = [p["final_return_mean"] for p in result.points]
    env_steps = sum(s["env_steps"] for s in result.summaries)
else:
    finals, env_steps = [], 0
    for rate in rates:
        run = jaxrl_async.train(jaxrl_async.load_config(
            name, base + [f"agent.learning_rate={rate}"]))
        finals.append(run.summary["final_return"])
        env_steps += run.summary["env_steps"]
print("RESULT", json.dumps({"seconds": time.perf_counter() - start, "env_steps": env_steps,
                            "finals": finals}))
"""


def rates_of(points: int) -> list[float]:
    """The grid: N learning rates log-spaced over [1e-4, 1e-3] (one: 2.5e-4)."""
    return [float(r) for r in np.geomspace(1e-4, 1e-3, points)] if points > 1 else [2.5e-4]


def run_commands(config: str, points: int, steps: int) -> dict:
    """N `python -m jaxrl_async train` processes one after another, one shared cache."""
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as runs:
        env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": cache}
        start, env_steps = time.perf_counter(), 0
        for k, rate in enumerate(rates_of(points)):
            run_dir = os.path.join(runs, str(k))
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "jaxrl_async",
                    "train",
                    "--run-dir",
                    run_dir,
                    config,
                    "train.progress=false",
                    f"train.total_steps={steps}",
                    f"train.log_every={steps}",
                    f"agent.learning_rate={rate}",
                ],
                capture_output=True,
                text=True,
                env=env,
            )
            if proc.returncode != 0:
                sys.exit(f"bench_sweep: command {k} of {points} failed:\n{proc.stderr[-2000:]}")
            with open(os.path.join(run_dir, "summary.json")) as f:
                env_steps += json.load(f)["env_steps"]
        return {"seconds": time.perf_counter() - start, "env_steps": env_steps}


def run_child(mode: str, config: str, points: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": cache}
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                CHILD,
                mode,
                config,
                str(points),
                str(steps),
                json.dumps(rates_of(points)),
            ],
            capture_output=True,
            text=True,
            env=env,
        )
    if proc.returncode != 0:
        sys.exit(f"bench_sweep: the {mode} run of {points} points failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.split("RESULT", 1)[1])


def spread(values) -> str:
    return f"{statistics.median(values):.3g} [{min(values):.3g}-{max(values):.3g}]"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="ppo_cartpole")
    p.add_argument("--points", default="1,4,16,64", help="grid sizes, comma-separated")
    p.add_argument("--steps", type=int, default=131_072, help="env steps of each run")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--separate",
        choices=("calls", "commands"),
        default="calls",
        help="N train() calls in one process (default) or N CLI commands",
    )
    p.add_argument("--json", default=None, help="also write every measurement here")
    args = p.parse_args(argv)
    sizes = [int(n) for n in args.points.split(",")]

    rows = []
    for n in sizes:
        times = {"sweep": [], "separate": []}
        for _ in range(args.repeats):
            for mode in ("sweep", "separate"):  # alternating, so load drifts hit both
                out = (
                    run_commands(args.config, n, args.steps)
                    if mode == "separate" and args.separate == "commands"
                    else run_child(mode, args.config, n, args.steps)
                )
                times[mode].append(out["seconds"])
                print(f"{n:>3} points, {mode:>8}: {out['seconds']:7.2f} s", flush=True)
        rows.append(
            {
                "points": n,
                "steps": args.steps,
                "separate_as": args.separate,
                **times,
                "ratio": [s / w for s, w in zip(times["separate"], times["sweep"])],
            }
        )

    print(
        f"\n{args.config}, {args.steps:,} env steps a run, compile included, separate runs "
        f"as {args.separate}, median [min-max] of {args.repeats}"
    )
    print(
        "| points | sweep s | separate s | sweep runs/s | separate runs/s | "
        "sweep SPS | separate SPS | separate / sweep |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        n = r["points"]
        rate = {m: [n / t for t in r[m]] for m in ("sweep", "separate")}
        sps = {m: [n * r["steps"] / t for t in r[m]] for m in ("sweep", "separate")}
        print(
            f"| {n} | {spread(r['sweep'])} | {spread(r['separate'])} | "
            f"{spread(rate['sweep'])} | {spread(rate['separate'])} | "
            f"{spread(sps['sweep'])} | {spread(sps['separate'])} | {spread(r['ratio'])} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
