#!/usr/bin/env python
"""JAX's CPU computations inline against dispatched asynchronously (JAX's own, which
JAX-env runs keep), for JAX-env training: each config trained in a fresh process of each
kind, interleaved.

    python scripts/bench_cpu_dispatch.py                       # ppo_cartpole, 64 and 512 envs
    python scripts/bench_cpu_dispatch.py --config ppo_breakout_minatar --envs 64 --repeats 5

The setting is fixed when JAX makes its CPU client, so every run is its own process, set
before it trains. JAX-env runs keep JAX's async dispatch and host runs compute inline
(`jaxrl_async/_xla_flags.py`); this is the measurement behind the first half. Training
SPS is the run's summary's, compile left out. Host runs are compared by
`bench_host.py --cpu-dispatch inline,async`.
"""

from __future__ import annotations

import json
import sys

import harness  # beside this script in scripts/
from bench_host import DISPATCH

_CHILD = (
    "import json, sys, jax, jaxrl_async; "
    "jax.config.update('jax_cpu_enable_async_dispatch', sys.argv[3] == 'true'); "
    "config = jaxrl_async.load_config(sys.argv[1], json.loads(sys.argv[2])); "
    "print(json.dumps({'sps': jaxrl_async.train(config).summary['sps']}))"
)


def train_sps(config: str, overrides: list[str], dispatch: str) -> dict:
    return harness.child(_CHILD, config, json.dumps(overrides), DISPATCH[dispatch])


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("--config", default="ppo_cartpole")
    p.add_argument("--envs", default="64,512", help="env.num_envs values")
    p.add_argument("--steps", type=int, default=1_048_576, help="train.total_steps of each run")
    p.add_argument("--override", action="append", default=[], help="section.key=value")
    args = p.parse_args(argv)
    envs = [int(n) for n in args.envs.split(",")]
    programs = {}
    for n in envs:
        overrides = [*args.override, f"env.num_envs={n}", f"train.total_steps={args.steps}"]
        overrides.append("train.progress=false")
        for d in DISPATCH:
            programs[f"{n} envs, {d}"] = lambda _, o=overrides, d=d: train_sps(args.config, o, d)
    runs = harness.interleave(programs, args.repeats)
    rows = []
    for n in envs:
        inline, dispatched = runs[f"{n} envs, inline"], runs[f"{n} envs, async"]
        rows.append(
            [
                str(n),
                harness.cell(harness.of(inline, "sps")),
                harness.cell(harness.of(dispatched, "sps")),
                harness.cell(harness.ratios(inline, dispatched), ".2f"),
            ]
        )
    columns = ["envs", "train SPS, inline", "train SPS, async dispatch", "inline/async"]
    return harness.report(__file__, argv, columns, rows, args.json, config=args.config, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
