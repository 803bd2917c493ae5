#!/usr/bin/env python
"""SPS of one training run spread over processes: 2 processes x 1 device against 1 process.

Each run is the real command line (`python -m jaxrl_async train`) in fresh processes:
- "1 proc x 1 dev":  one process, one CPU device;
- "1 proc x 2 dev":  one process, two forced CPU devices (data parallel in one process);
- "2 proc x 1 dev":  two processes on 127.0.0.1 joined by jax.distributed, one CPU
  device each: the same mesh of two, with gloo carrying the gradient all-reduce.
All use threefry keys (philox does not compile on two devices) and write a run
directory; SPS is the run's summary.json (compile excluded). One unmeasured run of each
setting first fills the compile cache; then the settings alternate, --repeats times.

    flock /tmp/cpu.lock .venv/bin/python scripts/bench_distributed.py [--envs 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SETTINGS = {"1 proc x 1 dev": (1, 1), "1 proc x 2 dev": (1, 2), "2 proc x 1 dev": (2, 1)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(processes: int, devices: int, args, timeout: float = 900) -> dict:
    """One training run; the summary of process 0."""
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
        return json.loads((run_dir / "summary.json").read_text())


def spread(values, fmt="{:,.0f}") -> str:
    return (
        f"{fmt.format(statistics.median(values))} "
        f"[{fmt.format(min(values))}–{fmt.format(max(values))}]"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="ppo_cartpole")
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=500_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the raw summaries here")
    args = parser.parse_args(argv)

    for processes, devices in SETTINGS.values():  # warm the compile cache
        run(processes, devices, args)
    results: dict[str, list[dict]] = {label: [] for label in SETTINGS}
    for _ in range(args.repeats):
        for label, (processes, devices) in SETTINGS.items():
            results[label].append(run(processes, devices, args))

    base = statistics.median(s["sps"] for s in results["1 proc x 1 dev"])
    print(
        f"{args.config}, {args.envs} envs, {args.steps:,} steps, median [min–max] of {args.repeats}"
    )
    print("| setting | SPS | compile s | vs 1 proc x 1 dev |")
    print("| --- | ---: | ---: | ---: |")
    for label, summaries in results.items():
        sps = [s["sps"] for s in summaries]
        print(
            f"| {label} | {spread(sps)} | "
            f"{spread([s['compile_seconds'] for s in summaries], '{:.1f}')} | "
            f"{statistics.median(sps) / base:.2f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
