#!/usr/bin/env python
"""Host-env training SPS by learner devices, on forced CPU devices, interleaved.

Layouts (each a real `jaxrl_async.train` of the config as shipped, plus --set, with
train.total_steps=--steps; `bench_devices.run`):
  1 learner device    pipeline.devices=1: the actor threads and the learner share cpu:0
  2 learner devices   pipeline.devices=2: each round's envs split over cpu:0 and cpu:1,
                      the agent's learn under shard_map, gradients averaged
  split               pipeline.placement=split pipeline.devices=1: the actors' policy on
                      cpu:0, the learner on cpu:1

XLA_FLAGS=--xla_force_host_platform_device_count=2 is set (by importing bench_devices)
before JAX starts. A run's SPS is its summary's (env steps of the rounds after the first,
over their wall time: compile and checkpoints excluded). The layouts alternate, --repeats
rounds; the table gives each layout's SPS and its ratio to 1 learner device, round by
round, medians [min–max].

    python scripts/bench_host_mesh.py --steps 40000 --json host_mesh.json
"""

from __future__ import annotations

import os
import sys

import bench_devices  # beside this script in scripts/; first: it forces 2 CPU devices
import harness  # beside this script in scripts/
import jax

LAYOUTS = {
    "1 learner device": ["pipeline.devices=1"],
    "2 learner devices": ["pipeline.devices=2"],
    "split": ["pipeline.placement=split", "pipeline.devices=1"],
}
BASE = "1 learner device"


def main(argv=None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("--config", default="ppo_gymnasium_cartpole")
    p.add_argument("--steps", type=int, default=40_000, help="train.total_steps of each run")
    p.add_argument(
        "--layouts", default=",".join(LAYOUTS), help="comma-separated, of: " + ", ".join(LAYOUTS)
    )
    p.add_argument("--set", action="append", default=[], metavar="section.key=value")
    args = p.parse_args(argv)
    layouts = {k: LAYOUTS[k] for k in args.layouts.split(",")}
    print(f"jax {jax.__version__} XLA_FLAGS={os.environ['XLA_FLAGS']!r}", file=sys.stderr)
    programs = {
        label: lambda _, o=overrides: bench_devices.run(args.config, [*args.set, *o], args.steps)
        for label, overrides in layouts.items()
    }
    runs = harness.interleave(programs, args.repeats, label=args.config)
    ratios = [k for k in layouts if k != BASE and BASE in layouts]
    row = [f"`{args.config}`", f"{args.steps:,}"]
    row += [harness.cell(harness.of(rs, "sps")) for rs in runs.values()]
    row += [harness.cell(harness.ratios(runs[k], runs[BASE]), ".2f") for k in ratios]
    columns = ["config", "steps/run", *layouts, *(f"{k} / {BASE}" for k in ratios)]
    return harness.report(__file__, argv, columns, [row], args.json, set=args.set, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
