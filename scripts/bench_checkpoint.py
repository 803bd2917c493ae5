#!/usr/bin/env python
"""Checkpoint cost: save and restore time and size on disk, and the SPS a run loses.

Part 1 saves the initial training state of each config (the same arrays, in size, as
any later state) to a fresh directory and restores it into the abstract state of a
freshly built pipeline, as `jaxrl-async resume` does; repeated, reported as
median [min–max]. "state KB" is the raw bytes of the state's arrays.

Part 2 (`--sps`) trains the config at `--steps` with a run directory, alternating
`checkpoint.every=<every>` with `checkpoint.every=0` (which still writes the final
checkpoint) after one unmeasured round of each, and reports the run's SPS over its
training loop (compile excluded, the time blocked on saves included), the summary's SPS
(which leaves that time out) and the seconds the loop blocked on saves.

    flock /tmp/cpu.lock .venv/bin/python scripts/bench_checkpoint.py --repeats 5
    flock /tmp/cpu.lock .venv/bin/python scripts/bench_checkpoint.py --sps --runs 3
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import harness  # beside this script in scripts/
import jax

import jaxrl_async
from jaxrl_async.pipeline.build import build_pipeline
from jaxrl_async.run import checkpoint as ckpt


def save_restore(name: str):
    """One round's program: save the config's initial state and restore it."""
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

    def program(_round: int) -> dict:
        with tempfile.TemporaryDirectory() as tmp:
            saver = ckpt.Checkpointer(tmp)
            start = time.perf_counter()
            path = saver.save(config.train.total_steps, state, {"config": config.to_yaml()})
            save = time.perf_counter() - start
            saver.close()
            disk = sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())
            start = time.perf_counter()
            jax.block_until_ready(ckpt.restore(tmp, abstract)[0])
            restore = time.perf_counter() - start
        return {"save_s": save, "restore_s": restore, "disk_bytes": disk, "state_bytes": raw}

    return program


def training(name: str, steps: int, every: int):
    """One round's program: a run with checkpoint.every=`every`."""

    def program(_round: int) -> dict:
        overrides = ["train.progress=false", f"train.total_steps={steps}"]
        with tempfile.TemporaryDirectory() as tmp:
            config = jaxrl_async.load_config(name, [*overrides, f"checkpoint.every={every}"])
            summary = jaxrl_async.train(config, run_dir=Path(tmp) / "run").summary
            return {
                "run_sps": summary["env_steps"] / summary["train_seconds"],
                "sps": summary["sps"],
                "checkpoint_seconds": summary["checkpoint_seconds"],
                "checkpoints": len(ckpt.steps(Path(tmp) / "run" / "checkpoints")),
            }

    return program


def main(argv=None) -> int:
    parser = harness.parser(__doc__, repeats=5)
    parser.add_argument("--configs", nargs="+", default=["ppo_cartpole"])
    parser.add_argument("--sps", action="store_true", help="measure the SPS overhead instead")
    parser.add_argument("--steps", type=int, default=500_000)
    parser.add_argument("--every", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3, help="rounds of --sps")
    args = parser.parse_args(argv)
    rows, runs = [], {}
    for name in args.configs:
        if args.sps:
            programs = {f"every={e}": training(name, args.steps, e) for e in (args.every, 0)}
            runs[name] = harness.interleave(programs, args.runs, warmup=1, label=name)
            rows += [
                [
                    f"`{name}`, {args.steps:,} steps, checkpoint.{label}",
                    harness.cell(harness.of(rs, "run_sps")),
                    harness.cell(harness.of(rs, "sps")),
                    harness.cell([1e3 * s for s in harness.of(rs, "checkpoint_seconds")], ".0f"),
                    str(rs[0]["checkpoints"]),
                ]
                for label, rs in runs[name].items()
            ]
        else:
            runs[name] = harness.interleave({"save": save_restore(name)}, args.repeats)["save"]
            rs = runs[name]
            rows.append(
                [
                    f"`{name}`",
                    *(
                        harness.cell([1e3 * s for s in harness.of(rs, k)], ".1f")
                        for k in (
                            "save_s",
                            "restore_s",
                        )
                    ),
                    harness.cell([b / 1e3 for b in harness.of(rs, "disk_bytes")], ".1f"),
                    f"{rs[0]['state_bytes'] / 1e3:.1f}",
                ]
            )
    columns = (
        ["run", "run SPS", "summary SPS", "saving ms", "checkpoints kept"]
        if args.sps
        else ["config", "save ms", "restore ms", "on disk KB", "state KB"]
    )
    return harness.report(__file__, argv, columns, rows, args.json, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
