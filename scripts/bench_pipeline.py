#!/usr/bin/env python
"""Pipeline SPS: lag 0/1/2 x fused/split placement x 1/2 devices, medians with min and max.

CPU devices are forced (XLA_FLAGS=--xla_force_host_platform_device_count=2, set here
before JAX starts unless XLA_FLAGS already names a device count). Every run trains
PPO (the ppo_cartpole config, rollout 128, 4 epochs x 4 minibatches) for about
--seconds of training after compiling; SPS excludes compile time.

    python scripts/bench_pipeline.py [--envs 64,2048] [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_force_host_platform_device_count=2").strip()

import jax  # noqa: E402

import jaxrl_async  # noqa: E402

SETTINGS = [  # (label, lag, placement, devices)
    ("fused lag0 1dev", 0, "fused", 1), ("fused lag1 1dev", 1, "fused", 1),
    ("fused lag2 1dev", 2, "fused", 1), ("fused lag0 2dev", 0, "fused", 2),
    ("fused lag1 2dev", 1, "fused", 2), ("fused lag2 2dev", 2, "fused", 2),
    ("split lag1 2dev", 1, "split", 2), ("split lag2 2dev", 2, "split", 2)]


def run(num_envs: int, lag: int, placement: str, devices: int, updates: int) -> dict:
    config = jaxrl_async.load_config("ppo_cartpole", [
        f"env.num_envs={num_envs}", f"pipeline.lag={lag}", f"pipeline.placement={placement}",
        f"pipeline.devices={devices}", "train.prng=threefry2x32", "train.progress=false",
        "train.compile_cache=false", f"train.total_steps={updates * num_envs * 128}",
        f"train.log_every={updates * num_envs * 128}"])
    s = jaxrl_async.train(config).summary
    return {"sps": s["sps"], "compile_seconds": s["compile_seconds"],
            "train_seconds": s["train_seconds"], "final_return": s["final_return"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="64,2048")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="training time per run")
    parser.add_argument("--only", default="", help="comma-separated labels to run")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if jax.local_device_count() < 2:
        print("needs 2 devices", file=sys.stderr)
        return 2
    results = {}
    for num_envs in [int(e) for e in args.envs.split(",")]:
        # Size each run from a quick probe of the slowest setting (fused, lag 0, 1 device).
        probe = run(num_envs, 0, "fused", 1, 2)
        updates = max(2, round(args.seconds * probe["sps"] / (num_envs * 128)))
        for label, lag, placement, devices in SETTINGS:
            if args.only and label not in args.only.split(","):
                continue
            runs = [run(num_envs, lag, placement, devices, updates) for _ in range(args.repeats)]
            sps = [r["sps"] for r in runs]
            results[f"{num_envs}/{label}"] = {"sps": sps, "updates": updates, "runs": runs}
            print(f"[bench] {num_envs} envs {label}: median {statistics.median(sps):,.0f} SPS "
                  f"[{min(sps):,.0f}-{max(sps):,.0f}]", file=sys.stderr, flush=True)
    print(f"jax {jax.__version__}, devices {jax.local_device_count()} (forced CPU), "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS')!r}, {args.repeats} repeats\n")
    print("| envs | setting | SPS median [min–max] | vs fused lag0 1dev |")
    print("| ---: | --- | ---: | ---: |")
    for key, r in results.items():
        num_envs, label = key.split("/")
        base = results.get(f"{num_envs}/fused lag0 1dev")
        ratio = (statistics.median(r["sps"]) / statistics.median(base["sps"])) if base else None
        print(f"| {num_envs} | {label} | {statistics.median(r['sps']):,.0f} "
              f"[{min(r['sps']):,.0f}–{max(r['sps']):,.0f}] | "
              f"{'-' if ratio is None else f'{ratio:.2f}'} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
