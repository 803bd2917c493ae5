#!/usr/bin/env python
"""Put a host-env benchmark's JSON into docs/performance.json as a table, then re-render
docs/performance.md, so that no figure is typed by hand.

    python scripts/bench_host.py --config ppo_halfcheetah --json host.json
    python scripts/host_tables.py host.json --title "..." --machine "2-core ..."

Reads the JSON of `scripts/bench_host.py` (random loop and lags) or of
`scripts/bench_host_baseline.py` (plain loop and lags), recognised by its keys. The
table's command is the one the JSON records; its commit is HEAD's unless --commit says
otherwise (measure on a clean tree), its date today's unless --date says otherwise. A
table of the same title is replaced, else the table is added to its section.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

import performance  # beside this script in scripts/
from provenance import shown_command

SECTION = "Host environments"


def si(x: float) -> str:
    """An SPS figure: 6.3k, 512."""
    return f"{x / 1000:.1f}k" if x >= 1000 else f"{x:.0f}"


def cell(spread: dict, digits: int | None = None) -> str:
    """median [min–max], as SPS (digits None) or with `digits` decimals."""
    show = si if digits is None else (lambda x: f"{x:.{digits}f}")
    return f"{show(spread['median'])} [{show(spread['min'])}–{show(spread['max'])}]"


def lag_rows(result: dict, loop: str) -> tuple[list[str], list[list[str]]]:
    """bench_host.py: the random loop, then one row per lag."""
    summary = result["summary"]
    columns = ["run", "training SPS", "of the random loop", "actor s (env + policy)"]
    columns += ["learner learn s", "ratio to lag 0"]
    rows = [[f"random loop ({loop}, no policy)", cell(summary["random_loop_sps"])]]
    rows[0] += ["1", "-", "-", "-"]
    lags = sorted(int(k[3:]) for k in summary if k.startswith("lag") and "_" not in k)
    for lag in lags:
        s = summary[f"lag{lag}"]
        ratio = summary.get(f"lag{lag}_over_lag{lags[0]}")
        rows.append(
            [
                f"lag {lag}",
                cell(s["sps"]),
                cell(s["of_random_loop"], 2),
                cell(s["actor_seconds"], 1),
                cell(s["learn_seconds"], 1),
                "1" if ratio is None else cell(ratio, 2),
            ]
        )
    return columns, rows


def baseline_rows(result: dict) -> tuple[list[str], list[list[str]]]:
    """bench_host_baseline.py: the plain loop, then the trainer at each lag."""
    summary = result["summary"]
    columns = ["run", "training SPS", "ratio to the plain loop", "final return"]
    rows = [["plain loop", cell(summary["baseline"]["sps"]), "1"]]
    rows[0].append(cell(summary["baseline"]["final_return"], 1))
    for key in sorted(k for k in summary if k.startswith("lag") and "_" not in k):
        rows.append(
            [
                f"trainer, lag {key[3:]}",
                cell(summary[key]["sps"]),
                cell(summary[f"{key}_over_baseline"], 2),
                cell(summary[key]["final_return"], 1),
            ]
        )
    return columns, rows


def put(tables: list[dict], table: dict) -> list[dict]:
    """`tables` with `table` in place of the one of its title, or after its section's last."""
    titles = [t["title"] for t in tables]
    if table["title"] in titles:
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
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("json", help="the benchmark's --json output")
    p.add_argument("--title", required=True)
    p.add_argument("--machine", required=True, help="e.g. '2-core AMD EPYC, CPU only'")
    p.add_argument("--loop", default="Gymnasium sync vector env", help="the random loop's env")
    p.add_argument("--note", default="")
    p.add_argument("--section", default=SECTION)
    p.add_argument("--commit")
    p.add_argument("--date", default=datetime.date.today().isoformat())
    args = p.parse_args(argv)
    result = json.loads(Path(args.json).read_text())
    columns, rows = (
        baseline_rows(result) if "baseline" in result["summary"] else lag_rows(result, args.loop)
    )
    commit = (
        args.commit
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    table = {
        "section": args.section,
        "title": args.title,
        "command": shown_command(result["command"]),
        "commit": commit,
        "machine": args.machine,
        "date": args.date,
        "columns": columns,
        "rows": rows,
    }
    if args.note:
        table["note"] = args.note
    tables = put(performance.load(), table)
    performance.SOURCE.write_text(dump(tables), encoding="utf-8")
    return performance.main([])


if __name__ == "__main__":
    sys.exit(main())
