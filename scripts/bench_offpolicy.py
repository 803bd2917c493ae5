#!/usr/bin/env python
"""Off-policy SPS: DQN with uniform against prioritized replay at several capacities, and SAC.

Every setting trains its shipped config (dqn_cartpole, sac_pendulum) for --steps env
steps with the compile cache off; SPS is the run's env steps over its training time
(compile excluded, warm-up before learning_starts included, as a user sees it).
Settings are interleaved within each repeat so that machine noise hits all of them
alike. Prints one row per setting: median [min-max] SPS and the prioritized/uniform ratio.

    python scripts/bench_offpolicy.py [--capacities 10000,100000,1000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics

import jaxrl_async


def run(config_name: str, steps: int, overrides: list[str]) -> dict:
    config = jaxrl_async.load_config(
        config_name,
        overrides
        + [
            f"train.total_steps={steps}",
            f"train.log_every={steps // 5}",
            "train.progress=false",
            "train.compile_cache=false",
        ],
    )
    summary = jaxrl_async.train(config).summary
    return {
        "sps": summary["sps"],
        "compile_seconds": summary["compile_seconds"],
        "final_return": summary["final_return"],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacities", default="10000,100000,1000000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dqn-steps", type=int, default=200_000)
    parser.add_argument("--sac-steps", type=int, default=20_000)
    parser.add_argument("--no-sac", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    settings = []  # (label, config, steps, overrides)
    for capacity in [int(c) for c in args.capacities.split(",")]:
        for kind in ("uniform", "prioritized"):
            settings.append(
                (
                    f"dqn {kind} {capacity:.0e}",
                    "dqn_cartpole",
                    args.dqn_steps,
                    [f"replay.kind={kind}", f"replay.capacity={capacity}"],
                )
            )
    if not args.no_sac:
        for kind in ("uniform", "prioritized"):
            settings.append(
                (f"sac {kind}", "sac_pendulum", args.sac_steps, [f"replay.kind={kind}"])
            )

    results: dict[str, list[dict]] = {label: [] for label, *_ in settings}
    for repeat in range(args.repeats):
        for label, name, steps, overrides in settings:
            results[label].append(run(name, steps, overrides))
            print(f"repeat {repeat} {label}: {results[label][-1]['sps']:,.0f} SPS", flush=True)

    def median(label):
        return statistics.median(r["sps"] for r in results[label])

    print(f"\n{'setting':<28} {'SPS median [min-max]':>32} {'compile s':>10} {'vs uniform':>11}")
    for label, *_ in settings:
        sps = [r["sps"] for r in results[label]]
        compile_s = statistics.median(r["compile_seconds"] for r in results[label])
        base = label.replace("prioritized", "uniform")
        ratio = f"{median(label) / median(base):.3f}" if base != label else ""
        print(
            f"{label:<28} {median(label):>12,.0f} [{min(sps):,.0f}-{max(sps):,.0f}]"
            f"{compile_s:>10.2f} {ratio:>11}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
