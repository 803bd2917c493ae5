#!/usr/bin/env python
"""SPS of one training run spread over processes: 2 processes x 1 device against 1 process.

Each run is the real command line (`python -m jaxrl_async train`) in fresh processes:
- "1 proc x 1 dev":  one process, one CPU device;
- "1 proc x 2 dev":  one process, two forced CPU devices (data parallel in one process);
- "2 proc x 1 dev":  two processes on 127.0.0.1 joined by jax.distributed, one CPU
  device each: the same mesh of two, with gloo carrying the gradient all-reduce.
All use threefry keys (philox does not compile on two devices) and write a run
directory; SPS is the run's summary.json (compile excluded). One unmeasured run of each
setting first fills the compile cache; then the settings alternate, --repeats rounds.

    flock /tmp/cpu.lock .venv/bin/python scripts/bench_distributed.py [--envs 64] [--repeats 3]
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import harness  # beside this script in scripts/

SETTINGS = {"1 proc x 1 dev": (1, 1), "1 proc x 2 dev": (1, 2), "2 proc x 1 dev": (2, 1)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(processes: int, devices: int, args, timeout: float = 900) -> dict:
    """One training run: figures of the summary of process 0."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        overrides = [
            f"env.num_envs={args.envs}",
            f"train.total_steps={args.steps}",
            "train.progress=false",
            "train.prng=threefry2x32",
            f"pipeline.devices={processes * devices}",
        ]
        env = {
            **os.environ,
            "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
        }
        port = _free_port()
        procs = []
        for i in range(processes):
            launch = (
                []
                if processes == 1
                else [
                    f"distributed.coordinator=127.0.0.1:{port}",
                    f"distributed.num_processes={processes}",
                    f"distributed.process_id={i}",
                ]
            )
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "jaxrl_async",
                        "train",
                        "--run-dir",
                        str(run_dir),
                        args.config,
                        *overrides,
                        *launch,
                    ],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        try:
            errors = [p.communicate(timeout=timeout)[1] for p in procs]
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        for p, err in zip(procs, errors):
            if p.returncode != 0:
                raise RuntimeError(f"run failed ({p.returncode}): {err[-2000:]}")
        summary = json.loads((run_dir / "summary.json").read_text())
        return {key: summary[key] for key in ("sps", "compile_seconds", "env_steps")}


def main(argv=None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--config", default="ppo_cartpole")
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=500_000)
    args = parser.parse_args(argv)
    programs = {
        label: lambda _, p=processes, d=devices: run(p, d, args)
        for label, (processes, devices) in SETTINGS.items()
    }
    runs = harness.interleave(programs, args.repeats, warmup=1)  # warm-up: the compile cache
    print(f"{args.config}, {args.envs} envs, {args.steps:,} steps, {args.repeats} rounds")
    base = runs["1 proc x 1 dev"]
    rows = [
        [
            label,
            harness.cell(harness.of(summaries, "sps"), ",.0f"),
            harness.cell(harness.of(summaries, "compile_seconds"), ".1f"),
            harness.cell(harness.ratios(summaries, base), ".2f"),
        ]
        for label, summaries in runs.items()
    ]
    columns = ["setting", "SPS", "compile s", "vs 1 proc x 1 dev"]
    return harness.report(__file__, argv, columns, rows, args.json, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
