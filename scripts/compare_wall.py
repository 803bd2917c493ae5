#!/usr/bin/env python
"""Configs side by side at equal wall time and at equal env steps, from their run directories.

    python scripts/compare_wall.py runs/results/pqn_breakout_minatar/seed* \
        runs/results/ppo_breakout_minatar/seed* [--seconds 600] [--steps 1e6] [--png out.png]

Run directories are grouped by their summary's config name (one group per config, one
run directory per seed). A run's clock starts when `train()` starts, so it includes the
compile and set-up (summary `wall_seconds - train_seconds`) before the first record's
training seconds. At a budget W, a seed's return is the training return of its last log
record at or before W (NaN if it had logged nothing by then), and its env steps are that
record's. The default W is the shortest group's median end time, so every group reached
it; the default env-step budget S is the smallest group's final env steps. The table gives
per group the mean ± sample std over seeds of the return at W and at S, and the env steps
at W; --png draws every seed's return against its clock.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from jaxrl_async.analysis.plot import _pyplot, _save, load_run
from jaxrl_async.errors import UserError


def load(run_dir: Path) -> dict:
    """A seed's config name and its records' (clock seconds, env steps, return)."""
    run = load_run(run_dir)  # the records analysis/plot.py reads; UserError if there are none
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    offset = summary["wall_seconds"] - summary["train_seconds"]
    points = list(
        zip(
            (offset + run["wall_seconds"]).tolist(),
            run["env_steps"].tolist(),
            run["episode_return"].tolist(),
        )
    )
    return {"config": run["name"], "points": points}


def at(points, index: int, budget: float):
    """The last (clock, steps, return) whose coordinate `index` is <= budget, else None."""
    before = [p for p in points if p[index] <= budget * (1 + 1e-9)]
    return before[-1] if before else None


def mean_std(values) -> str:
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return "-"
    text = (
        f"{finite[0]:.3g}"
        if len(finite) == 1
        else f"{statistics.mean(finite):.3g} ± {statistics.stdev(finite):.2g}"
    )
    return text + (f" ({len(finite)} of {len(values)})" if len(finite) < len(values) else "")


def compare(groups: dict[str, list[dict]], seconds: float | None, steps: float | None):
    """The table's rows and the budgets used."""
    if seconds is None:
        seconds = min(
            statistics.median(run["points"][-1][0] for run in runs) for runs in groups.values()
        )
    if steps is None:
        steps = min(min(run["points"][-1][1] for run in runs) for runs in groups.values())
    rows = []
    for name, runs in groups.items():
        at_time = [at(run["points"], 0, seconds) for run in runs]
        at_steps = [at(run["points"], 1, steps) for run in runs]
        rows.append(
            {
                "config": name,
                "seeds": len(runs),
                "return_at_seconds": [math.nan if p is None else p[2] for p in at_time],
                "steps_at_seconds": [0 if p is None else p[1] for p in at_time],
                "return_at_steps": [math.nan if p is None else p[2] for p in at_steps],
                "end_seconds": [run["points"][-1][0] for run in runs],
            }
        )
    return rows, seconds, steps


def format_table(rows, seconds: float, steps: float) -> str:
    lines = [
        f"| config | seeds | return at {seconds:.0f} s | env steps at {seconds:.0f} s | "
        f"return at {steps:,.0f} steps | end (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| `{r['config']}` | {r['seeds']} | {mean_std(r['return_at_seconds'])} | "
            f"{statistics.median(r['steps_at_seconds']):,.0f} | "
            f"{mean_std(r['return_at_steps'])} | "
            f"{statistics.median(r['end_seconds']):.0f} |"
        )
    return "\n".join(lines)


def plot(groups, seconds: float, out: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (name, runs) in enumerate(groups.items()):
        for k, run in enumerate(runs):
            t, _, ret = zip(*run["points"])
            ax.plot(t, ret, color=f"C{i}", alpha=0.8, label=name if k == 0 else None)
    ax.axvline(seconds, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("wall time from train() start (s)")
    ax.set_ylabel("episode return (training)")
    ax.legend()
    _save(fig, out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dirs", nargs="+", type=Path)
    p.add_argument("--seconds", type=float, default=None, help="the wall budget W")
    p.add_argument("--steps", type=float, default=None, help="the env-step budget S")
    p.add_argument("--png", type=Path, default=None)
    args = p.parse_args(argv)
    groups: dict[str, list[dict]] = {}
    for run_dir in args.run_dirs:
        try:
            run = load(run_dir)
        except (OSError, KeyError, UserError) as e:
            print(f"compare_wall: {run_dir} is not a finished run directory ({e})", file=sys.stderr)
            return 2
        groups.setdefault(run["config"], []).append(run)
    rows, seconds, steps = compare(groups, args.seconds, args.steps)
    print(format_table(rows, seconds, steps))
    if args.png:
        plot(groups, seconds, args.png)
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
