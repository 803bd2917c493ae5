#!/usr/bin/env python
"""Compile time of a config's two programs (init and the training chunk) under XLA option
variants, each compile in a fresh process with no compile cache, the variants alternated.

The suite compiles about 90 training programs, and a tiny one dominates a short test's time.
This script measures the compile figures of docs/performance.md#compile. A variant is a JSON object
of XLA compiler options for the chunk; init is compiled as the trainer compiles it
(`pipeline.compile_init`) unless the variant's "init" key gives init's options instead.

    python scripts/bench_compile.py                        # a tiny PPO, default options only
    python scripts/bench_compile.py --repeats 5 --variant \
        'opt1={"xla_backend_optimization_level": 1}' --variant \
        'cheap={"xla_llvm_disable_expensive_passes": true}' --variant \
        'init-opt0={"init": {"xla_backend_optimization_level": 0}}'
    python scripts/bench_compile.py --config dqn_cartpole --set agent.hidden_sizes=[16]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import harness  # beside this script in scripts/

TINY_PPO = [
    "env.num_envs=4",
    "pipeline.rollout_len=16",
    "agent.hidden_sizes=[16]",
    "train.total_steps=1024",
]

# One measurement: build, lower both programs, compile each once and time it.
CHILD = """
import json, sys, time
import jax
jax.config.update("jax_enable_compilation_cache", False)
import jaxrl_async
from jaxrl_async.pipeline.build import build_pipeline
from jaxrl_async.pipeline.program import compile_init

name, options, overrides = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
config = jaxrl_async.load_config(name, overrides + ["train.progress=false"])
pipeline, _ = build_pipeline(config)
init = jax.jit(pipeline.init).lower(jax.random.key(0, impl=config.prng_impl))
chunk = jax.jit(pipeline.chunk(4), donate_argnums=0).lower(init.out_info)
start = time.perf_counter()
init_options = options.pop("init", None)
compile_init(init) if init_options is None else init.compile(init_options)
middle = time.perf_counter()
chunk.compile(options or None)
print(json.dumps({"init": middle - start, "chunk": time.perf_counter() - middle}))
"""


def measure(name: str, options: dict, overrides: list[str]) -> dict:
    xla_flags = os.environ.get("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
    return harness.child(
        CHILD,
        name,
        json.dumps(options),
        json.dumps(overrides),
        env={"XLA_FLAGS": xla_flags},
        timeout=600,
    )


def parse_variant(text: str) -> tuple[str, dict]:
    label, sep, options = text.partition("=")
    try:
        parsed = json.loads(options) if sep else None
    except json.JSONDecodeError:
        parsed = None
    if not label or not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"expected LABEL={{json options}}, got {text!r}")
    return label, parsed


def main(argv=None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--config", default="ppo_cartpole")
    parser.add_argument(
        "--set",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="config overrides (default for ppo_cartpole: a tiny PPO)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        type=parse_variant,
        default=[],
        help='LABEL={json XLA options} for the chunk, and under "init" for init; '
        "'default' always runs",
    )
    args = parser.parse_args(argv)
    overrides = (
        args.set if args.set is not None else (TINY_PPO if args.config == "ppo_cartpole" else [])
    )
    variants = {"default": {}, **dict(args.variant)}
    programs = {
        label: lambda _, options=options: measure(args.config, options, overrides)
        for label, options in variants.items()
    }
    runs = harness.interleave(programs, args.repeats, label=args.config)
    print(f"{args.config} {' '.join(overrides)}, {args.repeats} rounds, medians [min–max]:")
    rows = [
        [label, *(harness.cell(harness.of(runs[label], p), ".2f", " s") for p in ("chunk", "init"))]
        for label in variants
    ]
    columns = ["variant", "chunk compile", "init compile"]
    return harness.report(__file__, argv, columns, rows, args.json, overrides=overrides, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
