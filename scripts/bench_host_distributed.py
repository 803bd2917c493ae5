#!/usr/bin/env python
"""Host-env training SPS over processes: 2 processes x 1 device against 1 process x 2.

Both settings learn on a mesh of two CPU devices (pipeline.devices=2), each round's envs
split over them, and end in the same parameters (tests/test_host_distributed.py):
- "1 proc x 2 dev": one process, two forced CPU devices, its actor threads stepping
  every env;
- "2 proc x 1 dev": two processes on 127.0.0.1 joined by jax.distributed, one CPU
  device each, each stepping half the envs in its own actor threads; every round the
  processes agree to go on, all-gather the round's episode sums and hand their halves of
  the batch to the learner, whose gradient all-reduce gloo carries.
Each run is the real command line in fresh processes (`bench_distributed.run`: the
config as shipped with --envs envs, threefry keys, a run directory); SPS is process 0's
summary.json (the first round, which compiles, excluded). The settings alternate,
--repeats rounds; the table gives medians [min–max].

    python scripts/bench_host_distributed.py --steps 40000 --json host_distributed.json
"""

from __future__ import annotations

import sys

import bench_distributed  # beside this script in scripts/
import harness  # beside this script in scripts/

SETTINGS = {"1 proc x 2 dev": (1, 2), "2 proc x 1 dev": (2, 1)}
BASE = "1 proc x 2 dev"


def main(argv=None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("--config", default="ppo_gymnasium_cartpole")
    p.add_argument("--envs", type=int, default=8, help="env.num_envs (the config's: 8)")
    p.add_argument("--steps", type=int, default=40_000, help="train.total_steps of each run")
    args = p.parse_args(argv)
    programs = {
        label: lambda _, n=processes, d=devices: bench_distributed.run(n, d, args)
        for label, (processes, devices) in SETTINGS.items()
    }
    runs = harness.interleave(programs, args.repeats, label=args.config)
    rows = [
        [
            label,
            harness.cell(harness.of(summaries, "sps"), ",.0f"),
            harness.cell(harness.of(summaries, "compile_seconds"), ".1f"),
            harness.cell(harness.ratios(summaries, runs[BASE]), ".2f"),
        ]
        for label, summaries in runs.items()
    ]
    columns = ["setting", "SPS", "compile s", f"vs {BASE}"]
    return harness.report(__file__, argv, columns, rows, args.json, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
