#!/usr/bin/env python
"""Checkpoint cost: save and restore time and size on disk, and the SPS a run loses.

Part 1 saves the initial training state of each config (the same arrays, in size, as
any later state) to a fresh directory and restores it into the abstract state of a
freshly built pipeline, as `jaxrl-async resume` does; repeated, reported as
median [min–max]. "state KB" is the raw bytes of the state's arrays.

Part 2 (`--sps`) trains the config at `--steps` with a run directory, alternating
`checkpoint.every=<every>` with `checkpoint.every=0` (which still writes the final
checkpoint), and reports the run's SPS over its training loop (compile excluded, the
time blocked on saves included), the summary's SPS (which leaves that time out) and
the seconds the loop blocked on saves.

    flock /tmp/cpu.lock .venv/bin/python scripts/bench_checkpoint.py --repeats 5
    flock /tmp/cpu.lock .venv/bin/python scripts/bench_checkpoint.py --sps --runs 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax

import jaxrl_async
from jaxrl_async.pipeline.build import build_pipeline
from jaxrl_async.run import checkpoint as ckpt


def spread(values, scale=1.0, fmt="{:.1f}"):
    values = [v * scale for v in values]
    return (
        f"{fmt.format(statistics.median(values))} "
        f"[{fmt.format(min(values))}–{fmt.format(max(values))}]"
    )


def save_restore(name: str, repeats: int) -> dict:
    config = jaxrl_async.load_config(name, ["train.progress=false"])
    pipeline, _ = build_pipeline(config)
    key = jax.random.key(config.train.seed, impl=config.prng_impl)
    abstract = jax.jit(pipeline.init).lower(key).out_info
    state = jax.block_until_ready(jax.jit(pipeline.init)(key))
    raw = sum(
        x.nbytes
        if not jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
        else jax.random.key_data(x).nbytes
        for x in jax.tree.leaves(state)
    )
    saves, restores, sizes = [], [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            saver = ckpt.Checkpointer(tmp)
            start = time.perf_counter()
            path = saver.save(config.train.total_steps, state, {"config": config.to_yaml()})
            saves.append(time.perf_counter() - start)
            saver.close()
            sizes.append(sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file()))
            start = time.perf_counter()
            restored, _ = ckpt.restore(tmp, abstract)
            jax.block_until_ready(restored)
            restores.append(time.perf_counter() - start)
    return {
        "config": name,
        "save_s": saves,
        "restore_s": restores,
        "disk_bytes": sizes,
        "state_bytes": raw,
    }


def sps_overhead(name: str, steps: int, every: int, runs: int) -> dict:
    out: dict = {every: [], 0: []}
    overrides = ["train.progress=false", f"train.total_steps={steps}"]
    jaxrl_async.train(jaxrl_async.load_config(name, overrides))  # warm: compile cache, pages
    for _ in range(runs):
        for value in (every, 0):
            with tempfile.TemporaryDirectory() as tmp:
                config = jaxrl_async.load_config(name, overrides + [f"checkpoint.every={value}"])
                summary = jaxrl_async.train(config, run_dir=Path(tmp) / "run").summary
                out[value].append(
                    {
                        "run_sps": summary["env_steps"] / summary["train_seconds"],
                        "sps": summary["sps"],
                        "checkpoint_seconds": summary["checkpoint_seconds"],
                        "checkpoints": len(ckpt.steps(Path(tmp) / "run" / "checkpoints")),
                    }
                )
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["ppo_cartpole"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sps", action="store_true", help="measure the SPS overhead instead")
    parser.add_argument("--steps", type=int, default=500_000)
    parser.add_argument("--every", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the raw numbers here")
    args = parser.parse_args(argv)

    results = []
    if args.sps:
        for name in args.configs:
            runs = sps_overhead(name, args.steps, args.every, args.runs)
            results.append({"config": name, "runs": {str(k): v for k, v in runs.items()}})
            for every, rows in runs.items():
                print(
                    f"{name} {args.steps:,} steps checkpoint.every={every}: run SPS "
                    f"{spread([r['run_sps'] for r in rows], 1e-3, '{:.0f}')}k, summary SPS "
                    f"{spread([r['sps'] for r in rows], 1e-3, '{:.0f}')}k, saving "
                    f"{spread([r['checkpoint_seconds'] for r in rows], 1e3, '{:.0f}')} ms "
                    f"({rows[0]['checkpoints']} kept on disk)"
                )
    else:
        print("config | save ms | restore ms | on disk KB | state KB")
        for name in args.configs:
            r = save_restore(name, args.repeats)
            results.append(r)
            print(
                f"{name} | {spread(r['save_s'], 1e3)} | {spread(r['restore_s'], 1e3)} | "
                f"{spread(r['disk_bytes'], 1e-3)} | {r['state_bytes'] / 1e3:.1f}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
