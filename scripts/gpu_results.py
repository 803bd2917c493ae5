#!/usr/bin/env python
"""The GPU check's JSON (scripts/gpu_check.py) as a section of docs/RESULTS.md.

    python scripts/gpu_results.py gpu_check/gpu_check.json     # copies it to docs/, rewrites

The JSON is copied to OUT/gpu_check.json (default docs/), and RESULTS.md is written again
by scripts/results.py's `write`, which appends this section wherever that file exists.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
from pathlib import Path

from provenance import shown_command  # beside this script in scripts/

ROOT = Path(__file__).resolve().parents[1]


def _cell(value, form: str) -> str:
    return "-" if value is None else form.format(value)


def _row(item: dict) -> str:
    """One table row: the item, its status, and what its run reported."""
    result = item.get("result") or {}
    status = item["status"] + (f": {item['error']}" if item.get("error") else "")
    if "points" in result:  # a sweep: its groups' runs, all points' seeds together
        groups = result.get("groups", [])
        steps = sum(g["env_steps"] * g["num_seeds"] for g in groups) or None
        train_s = sum(g["train_seconds"] for g in groups)
        sps = steps / train_s if steps and train_s else None
        compile_s = sum(g["compile_seconds"] for g in groups) if groups else None
        final = f"{len(result['points'])} points"
    elif "bytes_per_device" in result:  # plan
        memory = result.get("memory") or {}
        steps, sps, compile_s = None, None, None
        final = f"device memory {memory.get('what', '-')}"
    else:
        steps, sps = result.get("env_steps"), result.get("sps")
        compile_s, final = result.get("compile_seconds"), result.get("final_return")
        final = _cell(final, "{:.1f}")
    return (
        f"| {item['name']} | `{shown_command(item['command'])}` | {status.replace('|', '/')} | "
        f"{_cell(steps, '{:,}')} | {_cell(sps, '{:,.0f}')} | {_cell(compile_s, '{:.1f}')} | "
        f"{_cell(item.get('seconds'), '{:.0f}')} | {final} |"
    )


def gpu_section(path: Path) -> str:
    """The section for the GPU check JSON at `path`; empty where there is none."""
    if not path.is_file():
        return ""
    data = json.loads(path.read_text())
    jax_info = data.get("jax", {})
    devices = ", ".join(jax_info.get("devices", [])) or "-"
    lines = [
        "",
        "## GPU check",
        "",
        f"`{shown_command(data['command'])}` at commit {data['commit']} on {data['machine']}, "
        f"{data['date']}; jax {jax_info.get('jax', '-')}, devices: {devices}"
        + (" (tiny budgets: a dry run)" if data.get("tiny") else "")
        + ". Each item ran in its own process under its own timeout; **SPS**: env steps per "
        "second of training, compile excluded; **s**: the item's seconds, process start and "
        "compile included.",
        "",
        "| item | command | status | env steps | SPS | compile (s) | s | final return |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    lines += [_row(item) for item in data["items"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="gpu_check.py's OUT/gpu_check.json")
    parser.add_argument("--out", default=str(ROOT / "docs"), help="default: docs/")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    target = out / "gpu_check.json"
    if Path(args.json).resolve() != target.resolve():
        shutil.copyfile(args.json, target)
    spec = importlib.util.spec_from_file_location("results", Path(__file__).with_name("results.py"))
    assert spec is not None and spec.loader is not None
    results = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(results)
    rows_path = out / "results.json"
    rows = json.loads(rows_path.read_text())["rows"] if rows_path.is_file() else {}
    results.write(out, rows)
    print(f"-> {out / 'RESULTS.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
