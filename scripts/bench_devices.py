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
about --seconds of training; then the layouts alternate, --repeats rounds.

    python scripts/bench_devices.py --configs ppo_cartpole,dqn_cartpole [--repeats 3]
    python scripts/bench_devices.py --configs ppo_cartpole --set env.num_envs=2048
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    ).strip()

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
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", default="ppo_cartpole,impala_cartpole,dqn_cartpole,sac_pendulum")
    p.add_argument(
        "--layouts",
        default="1 device,2 devices,auto,split lag 1",
        help="comma-separated, of: " + ", ".join(LAYOUTS),
    )
    p.add_argument("--set", action="append", default=[], metavar="section.key=value")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    layouts = {k: LAYOUTS[k] for k in args.layouts.split(",")}
    results = {}
    for name in args.configs.split(","):
        config = jaxrl_async.load_config(name, args.set)
        batch = config.batch_size
        probe = run(name, [*args.set, "pipeline.devices=1"], 8 * batch)
        updates = max(8, round(args.seconds * probe["sps"] / batch))
        total = updates * batch
        print(
            f"[bench] {name}: {total:,} steps a run (probe {probe['sps']:,.0f} SPS)",
            file=sys.stderr,
            flush=True,
        )
        runs = {k: [] for k in layouts}
        for _ in range(args.repeats):
            for label, overrides in layouts.items():
                r = run(name, [*args.set, *overrides], total)
                runs[label].append(r)
                print(
                    f"[bench] {name} {label}: {r['sps']:,.0f} SPS, {r['devices']}",
                    file=sys.stderr,
                    flush=True,
                )
        results[name] = {"steps": total, "runs": runs}
    print(
        f"jax {jax.__version__} "
        f"XLA_FLAGS={os.environ['XLA_FLAGS']!r}, {args.repeats} rounds, --set {args.set}\n"
    )
    head = (
        "| config | steps/run | "
        + " | ".join(f"{k} SPS" for k in layouts)
        + " | "
        + " | ".join(f"{k} / 1 device" for k in layouts if k != "1 device")
        + " |"
    )
    print(head)
    print("| --- | ---: |" + " ---: |" * (2 * len(layouts) - 1))
    for name, res in results.items():
        sps = {k: [r["sps"] for r in v] for k, v in res["runs"].items()}
        med = {k: statistics.median(v) for k, v in sps.items()}
        cells = [
            f"{med[k] / 1e3:,.0f}k [{min(v) / 1e3:,.0f}–{max(v) / 1e3:,.0f}k]"
            for k, v in sps.items()
        ]
        ratios = [
            f"{med[k] / med['1 device']:.2f}"
            for k in layouts
            if k != "1 device" and "1 device" in med
        ]
        print(
            f"| {name} | {res['steps']:,} | "
            + " | ".join(cells)
            + " | "
            + " | ".join(ratios)
            + " |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
