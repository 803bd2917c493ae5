#!/usr/bin/env python
"""The reference run's figures: ppo_cartpole over seeds 0-2, each started cold (a fresh
compile cache) and then warm, each in a fresh process: round k is seed k, cold then warm.
Prints final returns, SPS and compile seconds (median [min–max]).

    python scripts/measure_reference.py [CONFIG] [--seeds 3] [--json out.json]
"""

import sys
import tempfile

import harness  # beside this script in scripts/

CHILD = """
import json, sys, jaxrl_async
config = jaxrl_async.load_config(sys.argv[1], [f"train.seed={sys.argv[2]}", "train.progress=false"])
print(json.dumps(jaxrl_async.train(config).summary))
"""
KEYS = ("final_return", "sps", "compile_seconds", "wall_seconds")


def main(argv=None) -> int:
    parser = harness.parser(__doc__, repeats=None)
    parser.add_argument("config", nargs="?", default="ppo_cartpole")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args(argv)
    caches: dict[int, tempfile.TemporaryDirectory] = {}

    def phase(name: str):
        def program(seed: int) -> dict:
            if name == "cold":
                caches[seed] = tempfile.TemporaryDirectory()
            cache = {"JAX_COMPILATION_CACHE_DIR": caches[seed].name}
            summary = harness.child(CHILD, args.config, seed, env=cache)
            if name == "warm":
                caches.pop(seed).cleanup()
            return {key: summary[key] for key in KEYS}

        return program

    runs = harness.interleave({p: phase(p) for p in ("cold", "warm")}, args.seeds)
    both = runs["cold"] + runs["warm"]
    rows = [
        [
            f"final return, seeds 0-{args.seeds - 1}",
            " / ".join(
                "-" if r is None else f"{r:.0f}" for r in harness.of(runs["warm"], "final_return")
            ),
        ],
        ["training SPS", harness.cell(harness.of(both, "sps"))],
        [
            "trace + compile, empty compile cache",
            harness.cell(harness.of(runs["cold"], "compile_seconds"), ".3g", " s"),
        ],
        [
            "trace + compile, warm compile cache",
            harness.cell(harness.of(runs["warm"], "compile_seconds"), ".3g", " s"),
        ],
    ]
    return harness.report(__file__, argv, ["measure", "value"], rows, args.json, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
