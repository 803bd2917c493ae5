#!/usr/bin/env python
"""The benchmark scripts' harness: run named programs in interleaved rounds, collect their
figures, show them as medians [min–max], and write the JSON a table of docs/performance.md
is made from.

A benchmark script declares what it compares and nothing else:

    programs = {"baseline": lambda round_: run_baseline(), "trainer": lambda round_: ...}
    runs = harness.interleave(programs, args.repeats)        # {name: [figures a round]}
    rows = [[name, harness.cell(harness.of(runs[name], "sps"))] for name in runs]
    return harness.report(__file__, argv, ["run", "SPS"], rows, args.json, runs=runs)

Each round runs every program once, in the order given, so that a drift of the machine's
load hits all of them alike. A program gets the round's index and returns a dict of its
figures. `report` prints the table and writes the JSON: the command as run, the commit,
the machine, the date, the table's columns and rows, and whatever raw figures the script
adds. That JSON becomes a table of docs/performance.json (and the page is re-rendered):

    python scripts/harness.py table host.json --title "..." --section "Host environments" \
        [--machine "2-core AMD EPYC, CPU only"] [--note "..."] [--commit C] [--date D]

A table of the same title is replaced, else the table is added after its section's last.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path

import performance  # beside this script in scripts/
from provenance import shown_command

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------ rounds


def interleave(
    programs: dict[str, Callable[[int], dict]], rounds: int, warmup: int = 0, label: str = ""
) -> dict[str, list[dict]]:
    """Run every program once a round, in the given order, `warmup` unrecorded rounds
    first (a compile cache filled, pages touched); each one's figures, a dict a round."""
    runs: dict[str, list[dict]] = {name: [] for name in programs}
    for round_ in range(-warmup, rounds):
        for name, program in programs.items():
            figures = program(max(round_, 0))
            where = "warm-up" if round_ < 0 else f"round {round_ + 1}/{rounds}"
            shown = ", ".join(f"{k} {_show(v)}" for k, v in figures.items())
            print(f"[{where}] {label}{' ' if label else ''}{name}: {shown}", file=sys.stderr)
            if round_ >= 0:
                runs[name].append(figures)
    return runs


def child(code: str, *args, env: dict | None = None, timeout: float | None = None) -> dict:
    """Run `code` in a fresh Python process (`python -c code ARGS`, `env` added to the
    environment): the JSON object its last line of stdout holds. A failure ends the
    script with the end of the child's stderr."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )
    if proc.returncode != 0:
        sys.exit(f"{Path(sys.argv[0]).name}: a measurement failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _show(value) -> str:
    if isinstance(value, float):
        return si(value) if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def of(runs: list[dict], key: str) -> list:
    """One figure of every round."""
    return [run[key] for run in runs]


def ratios(top: list[dict], bottom: list[dict], key: str = "sps") -> list[float]:
    """top / bottom of one figure, round by round (the two ran side by side)."""
    return [t[key] / b[key] for t, b in zip(top, bottom, strict=True)]


# ------------------------------------------------------------------------------ figures


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def si(x: float) -> str:
    """Three significant digits with a k or M: 512, 6.30k, 57.1k, 256k, 1.48M."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(x) >= scale * 0.9995:
            return f"{x / scale:#.3g}".rstrip(".") + suffix
    return f"{x:.0f}"


def cell(values, form: str | None = None, unit: str = "") -> str:
    """median [min–max] of `values` (or of a spread), as SPS (form None: si) or with a
    format spec such as ".2f"; `unit` after the median ("s")."""
    if not isinstance(values, dict):
        values = [v for v in values if v is not None]
        if not values:
            return "-"
    s = values if isinstance(values, dict) else spread(values)
    show = si if form is None else f"{{:{form}}}".format
    return f"{show(s['median'])}{unit} [{show(s['min'])}–{show(s['max'])}]"


def markdown(columns: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "| --- |" + " ---: |" * (len(columns) - 1)]
    return "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows])


# ------------------------------------------------------------------------------ provenance


def commit() -> str:
    """The checkout's short commit; where the tree was copied without git,
    $GPU_CHECK_COMMIT, else "unknown"."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        if out.returncode == 0:
            return out.stdout.strip()
    except OSError:
        pass
    return os.environ.get("GPU_CHECK_COMMIT", "unknown")


def machine() -> str:
    """CPU model and core count, e.g. 'AMD EPYC 7B13 (2 cores)'."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{model} ({cores} cores)"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def command(script: str, argv: list[str] | None) -> str:
    """The command line that ran `script` (its __file__) with `argv`."""
    args = sys.argv[1:] if argv is None else argv
    return shlex.join(["python", f"scripts/{Path(script).name}", *args])


# ------------------------------------------------------------------------------ output


def parser(doc: str, repeats: int | None = 3) -> argparse.ArgumentParser:
    """A script's parser: its docstring's first paragraph as description and the rest as
    epilog; --repeats (rounds, unless `repeats` is None) and --json."""
    head, _, rest = doc.strip().partition("\n\n")
    p = argparse.ArgumentParser(
        description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    if repeats is not None:
        p.add_argument("--repeats", type=int, default=repeats, help="interleaved rounds")
    p.add_argument("--json", default=None, help="write the table and every figure here")
    return p


def report(
    script: str,
    argv: list[str] | None,
    columns: list[str],
    rows: list[list[str]],
    json_path: str | None = None,
    **data,
) -> int:
    """Print the table; with `json_path`, write it with the command, commit, machine,
    date and `data` (the raw figures). Returns 0, a script's exit status."""
    print(markdown(columns, rows), flush=True)
    if json_path:
        record = {
            "command": command(script, argv),
            "commit": commit(),
            "machine": machine(),
            "date": now(),
            "columns": columns,
            "rows": rows,
            **data,
        }
        Path(json_path).write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return 0


# ------------------------------------------------------------------------------ the page


def put(tables: list[dict], table: dict) -> list[dict]:
    """`tables` with `table` in place of the one of its title, or after its section's last."""
    if any(t["title"] == table["title"] for t in tables):
        return [table if t["title"] == table["title"] else t for t in tables]
    last = max(
        (i for i, t in enumerate(tables) if t.get("section") == table["section"]), default=-1
    )
    return [*tables[: last + 1], table, *tables[last + 1 :]] if last >= 0 else [*tables, table]


def dump(tables: list[dict]) -> str:
    """docs/performance.json as it is kept: a table's keys one a line, a row one a line."""

    def table(t: dict) -> str:
        lines = []
        for key, value in t.items():
            if key == "rows":
                rows = ",\n".join("      " + json.dumps(r, ensure_ascii=False) for r in value)
                lines.append(f'    "rows": [\n{rows}\n    ]')
            else:
                lines.append(f"    {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
        return "  {\n" + ",\n".join(lines) + "\n  }"

    return '{"tables": [\n' + ",\n".join(table(t) for t in tables) + "\n]}\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Put a benchmark's --json into docs/performance.json")
    sub = p.add_subparsers(dest="action", required=True)
    t = sub.add_parser("table", help="add or replace the table the JSON holds; render the page")
    t.add_argument("json", help="a benchmark script's --json output")
    t.add_argument("--title", required=True)
    t.add_argument("--section", required=True, help="the page's heading, e.g. 'Sweeps'")
    t.add_argument("--machine", help="default: the CPU the JSON records")
    t.add_argument("--note", default="")
    t.add_argument("--commit", help="default: the commit the JSON records")
    t.add_argument("--date", default=date.today().isoformat())
    args = p.parse_args(argv)
    result = json.loads(Path(args.json).read_text())
    table = {
        "section": args.section,
        "title": args.title,
        "command": shown_command(result["command"]),
        "commit": args.commit or result["commit"],
        "machine": args.machine or result["machine"],
        "date": args.date,
        "columns": result["columns"],
        "rows": result["rows"],
    }
    if args.note:
        table["note"] = args.note
    tables = put(performance.load(performance.SOURCE), table)
    performance.SOURCE.write_text(dump(tables), encoding="utf-8")
    return performance.main([])


if __name__ == "__main__":
    sys.exit(main())
