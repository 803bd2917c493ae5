#!/usr/bin/env python
"""The GPU check: one prepared run of the items below, each in its own process under its
own timeout and the whole under a budget, into one JSON file for docs/RESULTS.md.

    python scripts/gpu_check.py --out gpu_check            # on the GPU machine
    python scripts/gpu_check.py --out /tmp/g --tiny        # the same items, tiny, on CPU

An item that fails, times out or finds no time left is recorded as such with the end of
its stderr; the next one runs. OUT/gpu_check.json holds the command, commit, machine,
date, JAX's devices and every item's result (the run's summary.json, a sweep's
sweep.json, or plan's JSON). `python scripts/gpu_results.py OUT/gpu_check.json` puts its
table into docs/RESULTS.md. --tiny swaps every item's budget for a few thousand steps
and a few envs, to prove the script on any machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import harness  # beside this script in scripts/

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["train.progress=false", "train.compile_cache=false"]
LEARNING_RATES = "[1e-4,2e-4,3e-4,5e-4,7e-4,1e-3,2e-3,3e-3]"
ENT_COEFS = "[0.0,0.001,0.003,0.01,0.02,0.03,0.05,0.1]"  # x 8 learning rates: 64 points
TINY = ["train.total_steps=4096", "train.log_every=2048", "env.num_envs=8", "eval.every=0"]


class Item(NamedTuple):
    name: str
    argv: list[str]  # jaxrl-async's arguments; train and sweep items get --run-dir/--sweep-dir
    timeout: int  # seconds
    tiny: list[str] = TINY  # overrides that make it a CPU-sized dry run


ITEMS = [
    Item("plan", ["plan", "ppo_cartpole", "--json"], 60, []),
    Item(
        "ppo_cartpole_2048",
        ["train", "ppo_cartpole", "env.num_envs=2048", "train.total_steps=50000000"],
        90,
    ),
    Item(
        "ppo_cartpole_8192",
        ["train", "ppo_cartpole", "env.num_envs=8192", "train.total_steps=100000000"],
        90,
    ),
    Item("ppo_breakout_minatar", ["train", "ppo_breakout_minatar"], 90),
    Item("pqn_breakout_minatar", ["train", "pqn_breakout_minatar"], 90),
    Item("ppo_brax_halfcheetah", ["train", "ppo_brax_halfcheetah"], 150),
    Item(
        "dqn_prioritized_1e6",
        ["train", "dqn_cartpole", "replay.kind=prioritized", "replay.capacity=1000000"],
        90,
        ["train.total_steps=2000", "replay.learning_starts=500", "env.num_envs=10"],
    ),
    Item(
        "sweep_64_points",
        [
            "sweep",
            "ppo_cartpole",
            f"agent.learning_rate={LEARNING_RATES}",
            f"agent.ent_coef={ENT_COEFS}",
            "train.total_steps=1000000",
        ],
        120,
        ["train.total_steps=2048", "env.num_envs=4", "train.log_every=1024"],
    ),
    Item("ppo_gymnasium_cartpole", ["train", "ppo_gymnasium_cartpole"], 60, TINY[:2]),
]


def _devices() -> dict:
    """JAX's version, backend and devices, asked in a child so this process holds no GPU."""
    code = (
        "import json, jax; d = jax.devices(); print(json.dumps({'jax': jax.__version__, "
        "'backend': jax.default_backend(), 'devices': [str(x) for x in d], "
        "'kind': d[0].device_kind}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1:] or ["no output"]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _argv(item: Item, tiny: bool, where: Path) -> list[str]:
    """The command line of `item`: its arguments, quiet overrides, the directory it
    writes to, and with `tiny` its tiny overrides last (they win)."""
    command, *rest = item.argv
    flag = {"train": "--run-dir", "sweep": "--sweep-dir"}.get(command)
    if flag is None:
        return [*item.argv, *(item.tiny if tiny else [])]
    return [command, flag, str(where), *rest, *QUIET, *(item.tiny if tiny else [])]


def _result(item: Item, where: Path, stdout: str) -> dict | None:
    """What the item wrote: summary.json, sweep.json, or plan's JSON on stdout."""
    if item.argv[0] == "plan":
        return json.loads(stdout)
    if item.argv[0] == "train":
        return json.loads((where / "summary.json").read_text())
    sweep = json.loads((where / "sweep.json").read_text())
    # each structural group trained as one run of all its points' seeds: its summary
    groups = sorted((where / "groups").glob("*/summary.json"))
    return {**sweep, "groups": [json.loads(g.read_text()) for g in groups]}


def run_item(item: Item, out: Path, tiny: bool, seconds: float) -> dict:
    """Run one item in its own process for at most `seconds`; never raises."""
    where = out / "runs" / item.name
    argv = _argv(item, tiny, where)
    # the command as the table shows it: the output folder as OUT
    shown = "jaxrl-async " + shlex.join(argv).replace(str(out), "OUT")
    record: dict = {"name": item.name, "command": shown}
    if seconds < 5:
        return {**record, "status": "skipped", "error": "no time left in the budget"}
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "jaxrl_async", *argv],
            capture_output=True,
            text=True,
            timeout=seconds,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        return {**record, "status": "timeout", "seconds": time.perf_counter() - start}
    record["seconds"] = time.perf_counter() - start
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-3:]
        return {**record, "status": f"failed (exit {done.returncode})", "error": " / ".join(tail)}
    try:
        return {**record, "status": "ok", "result": _result(item, where, done.stdout)}
    except (OSError, ValueError) as e:
        return {**record, "status": "failed (unreadable output)", "error": str(e)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_check", help="OUT/gpu_check.json and OUT/runs/")
    parser.add_argument("--budget", type=float, default=420, help="seconds for all items")
    parser.add_argument("--tiny", action="store_true", help="tiny budgets: a dry run on CPU")
    parser.add_argument("--items", default="", help="comma-separated item names (default: all)")
    args = parser.parse_args(argv)
    names = [n for n in args.items.split(",") if n]
    items = [i for i in ITEMS if not names or i.name in names]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "command": "python scripts/gpu_check.py" + (" " + shlex.join(argv) if argv else ""),
        "commit": harness.commit(),  # $GPU_CHECK_COMMIT where the tree has no git
        "machine": f"{platform.node()}, {harness.machine()}",
        "date": harness.now(),
        "tiny": args.tiny,
        "jax": _devices(),
        "items": [],
    }
    deadline = time.perf_counter() + args.budget
    for item in items:
        left = min(item.timeout, deadline - time.perf_counter())
        report["items"].append(run_item(item, out, args.tiny, left))
        print(f"{item.name}: {report['items'][-1]['status']}", flush=True)
        (out / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n")
    failed = [r["name"] for r in report["items"] if r["status"] != "ok"]
    print(f"-> {out / 'gpu_check.json'}" + (f"; not ok: {', '.join(failed)}" if failed else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
