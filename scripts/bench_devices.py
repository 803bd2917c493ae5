#!/usr/bin/env python
"""Training SPS of shipped configs by device layout, on forced CPU devices, interleaved.

Layouts (each a real `jaxrl_async.train` of the config as shipped, plus --set):
  1 device       pipeline.devices=1 (the default keys, philox4x32, as in every layout)
  1 device threefry  the same with threefry2x32 keys
  2 devices      pipeline.devices=2: data parallel, each device half the envs and half
                 of every minibatch, gradients averaged
  2 devices threefry  the same with threefry2x32 keys
  auto           pipeline.devices=0 (the default): the trainer's own choice
  split lag 1    pipeline.placement=split pipeline.lag=1: one device acts while the other
                 learns on the previous tick's data (against 1 device at the config's lag)

XLA_FLAGS=--xla_force_host_platform_device_count=2 is set here before JAX starts. A run's
SPS is its summary's (compile excluded). One probe run per config sizes the runs to
about --seconds of training; then the layouts alternate, --repeats rounds; the table
gives each layout's SPS and its ratio to 1 device, round by round, medians [min–max].

    python scripts/bench_devices.py --configs ppo_cartpole,dqn_cartpole [--repeats 3]
    python scripts/bench_devices.py --configs ppo_cartpole --set env.num_envs=2048
"""

from __future__ import annotations

import os
import sys

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    ).strip()

import harness  # beside this script in scripts/
import jax

import jaxrl_async

LAYOUTS = {
    "1 device": ["pipeline.devices=1"],
    "1 device threefry": ["pipeline.devices=1", "train.prng=threefry2x32"],
    "2 devices": ["pipeline.devices=2"],
    "2 devices threefry": ["pipeline.devices=2", "train.prng=threefry2x32"],
    "auto": ["pipeline.devices=0"],
    "split lag 1": ["pipeline.devices=2", "pipeline.placement=split", "pipeline.lag=1"],
}


def run(name: str, overrides: list[str], total_steps: int) -> dict:
    config = jaxrl_async.load_config(
        name,
        [
            *overrides,
            f"train.total_steps={total_steps}",
            f"train.log_every={total_steps // 4}",
            "train.progress=false",
            "eval.every=0",
        ],
    )
    s = jaxrl_async.train(config).summary
    return {
        key: s.get(key)
        for key in (
            "sps",
            "compile_seconds",
            "train_seconds",
            "final_return",
            "devices",
            "device_choice",
        )
    }


def main(argv=None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("--configs", default="ppo_cartpole,impala_cartpole,dqn_cartpole,sac_pendulum")
    p.add_argument(
        "--layouts",
        default="1 device,2 devices,auto,split lag 1",
        help="comma-separated, of: " + ", ".join(LAYOUTS),
    )
    p.add_argument("--set", action="append", default=[], metavar="section.key=value")
    p.add_argument("--seconds", type=float, default=3.0)
    args = p.parse_args(argv)
    layouts = {k: LAYOUTS[k] for k in args.layouts.split(",")}
    print(f"jax {jax.__version__} XLA_FLAGS={os.environ['XLA_FLAGS']!r}", file=sys.stderr)
    rows, results = [], {}
    for name in args.configs.split(","):
        batch = jaxrl_async.load_config(name, args.set).batch_size
        probe = run(name, [*args.set, "pipeline.devices=1"], 8 * batch)
        total = max(8, round(args.seconds * probe["sps"] / batch)) * batch
        print(f"{name}: {total:,} steps a run (probe {probe['sps']:,.0f} SPS)", file=sys.stderr)
        programs = {
            label: lambda _, n=name, o=overrides, t=total: run(n, [*args.set, *o], t)
            for label, overrides in layouts.items()
        }
        runs = harness.interleave(programs, args.repeats, label=name)
        results[name] = {"steps": total, "runs": runs}
        rows.append(
            [f"`{name}`", f"{total:,}"]
            + [harness.cell(harness.of(rs, "sps")) for rs in runs.values()]
            + [
                harness.cell(harness.ratios(runs[k], runs["1 device"]), ".2f")
                for k in layouts
                if k != "1 device" and "1 device" in layouts
            ]
        )
    columns = ["config", "steps/run", *layouts]
    columns += [f"{k} / 1 device" for k in layouts if k != "1 device" and "1 device" in layouts]
    return harness.report(__file__, argv, columns, rows, args.json, set=args.set, results=results)


if __name__ == "__main__":
    sys.exit(main())
