#!/usr/bin/env python
"""Train every shipped config over several seeds at its budget; write docs/RESULTS.md.

    python scripts/results.py                                  # all configs, seeds 0-2
    python scripts/results.py --configs ppo_catch,dqn_cartpole --seeds 3
    python scripts/results.py --configs ppo_cartpole --override train.total_steps=4096

Each seed trains in this process with the persistent compile cache off (so compile
seconds are cold compiles) and no checkpoints; its config, log records and summary go
to RUNS/<config>/seed<k>/ (default runs/results/, not in git). Rows accumulate in
OUT/results.json (default docs/), one per config: a run of a subset replaces those
configs' rows and keeps the others, so the table can be built in pieces. Then
OUT/RESULTS.md is written from all rows (with where and how each row was made) and
OUT/results_<config>.png draws each config's learning curves (mean, min-max band).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import platform
import shlex
import shutil
import statistics
import sys
import time
import traceback
from importlib import metadata
from pathlib import Path

from harness import machine, now  # beside this script in scripts/
from provenance import shown_command

# Results describe the training as shipped: cold compiles, no progress bar on stdout.
BASE_OVERRIDES = ("train.compile_cache=false", "train.progress=false")
PACKAGES = ("jax", "jaxlib", "flax", "optax", "gymnax", "numpy")
ROOT = Path(__file__).resolve().parents[1]


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "-"
    return found


def train_seed(name: str, seed: int, overrides: list[str], run_dir: Path) -> dict:
    """Train one seed of config `name`; its records and summary go to `run_dir`."""
    import jaxrl_async
    from jaxrl_async.run.sinks import JsonlSink

    config = jaxrl_async.load_config(name, [*BASE_OVERRIDES, *overrides, f"train.seed={seed}"])
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(config.to_yaml())
    # Records through a callback, not train(run_dir=...): a run dir would also save a final
    # checkpoint (the whole replay for DQN), whose time would count in the wall seconds.
    sink = JsonlSink(run_dir / "metrics.jsonl")
    try:
        summary = jaxrl_async.train(config, callbacks=[sink]).summary
    finally:
        sink.close()
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def run_config(
    name: str,
    seeds: int,
    overrides: list[str],
    runs: Path,
    out: Path,
    batch: dict,
    random_episodes: int = 100,
) -> dict:
    """Train seeds 0..seeds-1 of `name` and draw its curves: its row of the table.

    A seed that raises ends the config: its row keeps the seeds done and the error.
    """
    import jaxrl_async
    from jaxrl_async.analysis.plot import plot_runs

    config = jaxrl_async.load_config(name, [*BASE_OVERRIDES, *overrides])
    row = {
        "config": name,
        "env": config.env.name,
        "agent": config.agent.name,
        "budget": config.num_updates * config.batch_size,
        "overrides": overrides,
        "seeds": [],
        "final_return": [],
        "eval_return": [],
        "sps": [],
        "compile_seconds": [],
        "wall_seconds": [],
        "png": None,
        "random_play": None,
        "error": None,
        **batch,
    }
    run_dirs = []
    for seed in range(seeds):
        run_dir = runs / name / f"seed{seed}"
        try:
            summary = train_seed(name, seed, overrides, run_dir)
        except Exception as e:  # noqa: BLE001  (the table goes on; the row says why)
            traceback.print_exc()
            lines = str(e).strip().splitlines()
            row["error"] = f"seed {seed}: {type(e).__name__}: {lines[0] if lines else ''}"
            return row
        run_dirs.append(run_dir)
        row["budget"] = summary["env_steps"]
        for key in ("final_return", "sps", "compile_seconds", "wall_seconds"):
            row[key].append(summary[key])
        if summary.get("eval_return_mean") is not None:  # the config evaluates at the end
            row["eval_return"].append(summary["eval_return_mean"])
        row["seeds"].append(seed)
        final = summary["final_return"]
        print(
            f"{name} seed {seed}: final return "
            f"{'-' if final is None else f'{final:.3f}'}, {summary['sps']:,.0f} SPS, "
            f"compile {summary['compile_seconds']:.1f}s, wall {summary['wall_seconds']:.1f}s",
            flush=True,
        )
    row["random_play"] = random_play(config, random_episodes)
    png = out / f"results_{name}.png"
    random = row["random_play"]
    plot_runs(run_dirs, png, {"random play": random["mean"]} if random else None)
    row["png"] = png.name
    return row


def random_play(config, episodes: int) -> dict | None:
    """The return of uniformly random actions on the config's env, the line its curves
    are read against: measured over `episodes` episodes on a host env (its options, raw
    scores), the reference table's value for a JAX env in it, or None."""
    from jaxrl_async.analysis.reference_scores import reference

    if config.env.host:
        if episodes < 2:
            return None
        from jaxrl_async.host.random_play import random_returns

        returns = random_returns(config.env, episodes)
        se = float(returns.std(ddof=1) / math.sqrt(len(returns)))
        return {"mean": float(returns.mean()), "se": se, "episodes": len(returns)}
    ref = reference(config.env.name, config.env.kwargs)
    return None if ref is None else {"mean": ref.random, "se": None, "episodes": None}


def _decimals(value: float) -> int:
    """Decimals for a return of this size: -125, 12.3, 0.99."""
    return 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2


def _returns_cell(returns: list) -> str:
    finite = [r for r in returns if r is not None and math.isfinite(r)]
    if not finite:
        return "no episode ended"
    mean = statistics.fmean(finite)
    std = statistics.stdev(finite) if len(finite) > 1 else 0.0
    places = _decimals(mean)
    cell = f"{mean:.{places}f} ± {std:.{places}f}"
    if len(finite) < len(returns):
        cell += f" ({len(finite)} of {len(returns)} seeds)"
    return cell


def _iqm_cell(returns: list) -> str:
    """The IQM over seeds with its 95% bootstrap interval (as `jaxrl-async report`)."""
    from jaxrl_async.analysis import stats

    finite = stats.finite(returns)
    if not finite:
        return "-"
    iqm, (low, high) = stats.interval([finite], stats.iqm)
    places = _decimals(iqm)
    return f"{iqm:.{places}f} [{low:.{places}f}, {high:.{places}f}]"


def _median(values: list, form: str) -> str:
    return form.format(statistics.median(values)) if values else "-"


def render(rows: dict[str, dict]) -> str:
    """RESULTS.md from every row of results.json."""
    ordered = [rows[name] for name in sorted(rows)]
    batches: dict[tuple, list[str]] = {}
    for row in ordered:
        command = shown_command(row["command"])
        key = (row["date"], command, row["machine"], json.dumps(row["versions"]))
        batches.setdefault(key, []).append(row["config"])
    total = sum(sum(row["wall_seconds"]) for row in ordered)
    lines = [
        "# Results",
        "",
        "Every shipped config (`jaxrl_async/config/yaml/`) trained over several seeds at its own "
        "budget by `scripts/results.py`, which wrote this file and the curves below. "
        "**final return**: the mean return of the episodes that ended in a run's last log "
        "interval (`summary.json` `final_return`), mean ± sample std over seeds; **IQM**: "
        "their interquartile mean with its 95% stratified-bootstrap interval "
        "(`jaxrl-async report`'s statistics; with 3 seeds, the mean). **SPS**: env "
        "steps per second of training, compile excluded; **compile**: seconds to compile "
        "the training program, persistent compile cache off; **wall**: seconds from "
        "`train()`'s start to its end, compile included. SPS, compile and wall are medians "
        "over seeds; seeds run one after another in one process. **eval return**, for the "
        "configs that evaluate: the mean return of the final parameters over the config's "
        "evaluation episodes (`eval.mode`), mean ± std over seeds.",
        "",
        f"Training wall time of all rows: {total / 60:.1f} min.",
        "",
        "| config | env | agent | budget (env steps) | seeds | final return | IQM [95% CI] | "
        "eval return | SPS | compile (s) | wall (s) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in ordered:
        name = f"`{row['config']}`"
        if row["overrides"]:
            name += " " + " ".join(f"`{o}`" for o in row["overrides"])
        returns = _returns_cell(row["final_return"]) if row["seeds"] else "-"
        if row.get("error"):
            returns = f"**failed** ({row['error'].replace('|', '/')}); {returns}"
        lines.append(
            f"| {name} | {row['env']} | {row['agent']} | {row['budget']:,} | "
            f"{len(row['seeds'])} | {returns} | {_iqm_cell(row['final_return'])} | "
            f"{_returns_cell(row['eval_return']) if row.get('eval_return') else '-'} | "
            f"{_median(row['sps'], '{:,.0f}')} | {_median(row['compile_seconds'], '{:.1f}')} | "
            f"{_median(row['wall_seconds'], '{:.0f}')} |"
        )
    lines += ["", "## How these rows were made", ""]
    for (date, command, where, packages), names in batches.items():
        packages = json.loads(packages)
        lines += [
            f"- `{command}` on {date}, {where}; "
            + ", ".join(f"{k} {v}" for k, v in packages.items())
            + ": "
            + ", ".join(f"`{n}`" for n in names)
        ]
    lines += [
        "",
        "## Learning curves",
        "",
        "Return against env steps and wall time, and SPS against env steps: the mean "
        "over seeds with a min–max band.",
        "",
    ]
    for row in ordered:
        if row["png"]:
            lines += [f"### {row['config']}", ""]
            random = row.get("random_play")
            if random and random["episodes"]:
                lines += [
                    f"Random play (dashed): {random['mean']:.2f} ± {random['se']:.2f} (mean ± "
                    f"standard error over {random['episodes']} episodes of uniformly random "
                    "actions, the same env options).",
                    "",
                ]
            elif random:
                lines += [f"Random play (dashed): {random['mean']:g}, reference table.", ""]
            lines += [f"![{row['config']}]({row['png']})", ""]
    return "\n".join(lines)


def write(out: Path, rows: dict[str, dict]) -> None:
    (out / "results.json").write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    (out / "RESULTS.md").write_text(render(rows) + _gpu_section(out))


def _gpu_section(out: Path) -> str:
    """The GPU check's table (scripts/gpu_results.py) where OUT/gpu_check.json exists."""
    path = Path(__file__).with_name("gpu_results.py")
    spec = importlib.util.spec_from_file_location("gpu_results", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.gpu_section(out / "gpu_check.json")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--configs", default="", help="comma-separated config names (default: every shipped config)"
    )
    parser.add_argument("--seeds", type=int, default=3, help="train seeds 0..N-1 (default 3)")
    parser.add_argument(
        "--out",
        default=str(ROOT / "docs"),
        help="RESULTS.md, results.json and the PNGs (default: docs/)",
    )
    parser.add_argument(
        "--runs",
        default=str(ROOT / "runs" / "results"),
        help="the seeds' run directories (default: runs/results/)",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="applied to every config (repeatable), e.g. train.total_steps=4096",
    )
    parser.add_argument(
        "--random-episodes",
        type=int,
        default=100,
        help="episodes of random play measured for a host env's baseline (default 100)",
    )
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")

    from jaxrl_async.config.loader import available_configs
    from jaxrl_async.errors import UserError

    shipped = available_configs()
    names = [n.strip() for n in args.configs.split(",") if n.strip()] or shipped
    unknown = [n for n in names if n not in shipped]
    if unknown:
        parser.error(f"unknown config(s) {', '.join(unknown)} (shipped: {', '.join(shipped)})")
    try:  # bad overrides fail here, before anything trains
        import jaxrl_async

        for name in names:
            jaxrl_async.load_config(name, [*BASE_OVERRIDES, *args.override])
    except UserError as e:
        print(f"results.py: {e}", file=sys.stderr)
        return 2

    out, runs = Path(args.out), Path(args.runs)
    out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict] = {}
    if (out / "results.json").is_file():
        rows = json.loads((out / "results.json").read_text())["rows"]
    batch = {
        "date": now(),
        "command": shown_command(shlex.join(["python", "scripts/results.py", *argv])),
        "machine": machine(),
        "versions": versions(),
    }
    start = time.perf_counter()
    for name in names:
        rows[name] = run_config(
            name, args.seeds, args.override, runs, out, batch, args.random_episodes
        )
        write(out, rows)  # after every config: an interrupted run keeps what it finished
    failed = [name for name in names if rows[name]["error"]]
    print(
        f"{len(names)} configs x {args.seeds} seeds in {time.perf_counter() - start:.0f}s "
        f"-> {out / 'RESULTS.md'}" + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
