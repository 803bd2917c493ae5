#!/usr/bin/env python
"""The reference run's figures: ppo_cartpole over seeds 0-2, each started cold (a fresh
compile cache) and then warm, each in a fresh process. Prints one JSON line per run
and a summary: final returns, SPS and compile seconds (median [min-max]).

    python scripts/measure_reference.py [CONFIG] [--seeds 3]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = """
import json, sys, jaxrl_async
config = jaxrl_async.load_config(sys.argv[1], [f"train.seed={sys.argv[2]}", "train.progress=false"])
print(json.dumps(jaxrl_async.train(config).summary))
"""


def spread(xs):
    return f"{statistics.median(xs):.3g} [{min(xs):.3g}-{max(xs):.3g}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default="ppo_cartpole")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for seed in range(args.seeds):
        with tempfile.TemporaryDirectory() as cache:
            for phase in ("cold", "warm"):
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, args.config, str(seed)],
                    check=True,
                    capture_output=True,
                    text=True,
                    env={**os.environ, "JAX_COMPILATION_CACHE_DIR": cache},
                )
                s = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append(
                    {
                        "seed": seed,
                        "phase": phase,
                        **{
                            k: s[k]
                            for k in ("final_return", "sps", "compile_seconds", "wall_seconds")
                        },
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    print("final returns:", sorted({r["seed"]: r["final_return"] for r in rows}.items()))
    print("SPS:", spread([r["sps"] for r in rows]))
    for phase in ("cold", "warm"):
        print(
            f"compile seconds {phase}:",
            spread([r["compile_seconds"] for r in rows if r["phase"] == phase]),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
