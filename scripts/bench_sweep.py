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
The two sides alternate, `--repeats` rounds; the table gives medians [min–max]: wall
seconds, the time ratio separate / sweep, round by round, and aggregate SPS (all runs'
env steps over the wall time, compile included).

    python scripts/bench_sweep.py                         # ppo_cartpole, 1/4/16/64 points
    python scripts/bench_sweep.py --points 16 --repeats 3 --steps 131072
    python scripts/bench_sweep.py --points 16 --separate commands
    python scripts/bench_sweep.py --json sweep_bench.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from functools import partial

import harness  # beside this script in scripts/
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
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "env_steps": env_steps, "finals": finals}))
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
    """The sweep, or the N train() calls, in a fresh process with an empty compile cache."""
    with tempfile.TemporaryDirectory() as cache:
        rates = json.dumps(rates_of(points))
        env = {"JAX_COMPILATION_CACHE_DIR": cache}
        return harness.child(CHILD, mode, config, points, steps, rates, env=env)


def main(argv=None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("--config", default="ppo_cartpole")
    p.add_argument("--points", default="1,4,16,64", help="grid sizes, comma-separated")
    p.add_argument("--steps", type=int, default=131_072, help="env steps of each run")
    p.add_argument(
        "--separate",
        choices=("calls", "commands"),
        default="calls",
        help="N train() calls in one process (default) or N CLI commands",
    )
    args = p.parse_args(argv)
    separate = run_commands if args.separate == "commands" else partial(run_child, "separate")
    rows, runs = [], {}
    for n in [int(n) for n in args.points.split(",")]:
        programs = {
            "sweep": lambda _, n=n: run_child("sweep", args.config, n, args.steps),
            "separate": lambda _, n=n: separate(args.config, n, args.steps),
        }
        runs[n] = harness.interleave(programs, args.repeats, label=f"{n} points")
        seconds = {mode: harness.of(rs, "seconds") for mode, rs in runs[n].items()}
        rows.append(
            [
                str(n),
                *(harness.cell(seconds[m], ".3g", " s") for m in ("sweep", "separate")),
                harness.cell(
                    harness.ratios(runs[n]["separate"], runs[n]["sweep"], "seconds"), ".3g"
                ),
                *(
                    harness.cell([n * args.steps / t for t in seconds[m]])
                    for m in ("sweep", "separate")
                ),
            ]
        )
    print(
        f"{args.config}, {args.steps:,} env steps a run, compile included, separate runs "
        f"as {args.separate}, {args.repeats} rounds"
    )
    columns = ["points", "sweep", f"separate {args.separate}", "separate / sweep"]
    columns += ["sweep aggregate SPS", "separate aggregate SPS"]
    return harness.report(__file__, argv, columns, rows, args.json, runs=runs)


if __name__ == "__main__":
    raise SystemExit(main())
