#!/usr/bin/env python
"""Write docs/performance.md from the benchmark tables in docs/performance.json.

    python scripts/performance.py            # rewrite docs/performance.md
    python scripts/performance.py --check    # exit 1 if docs/performance.md is out of date

docs/performance.json holds {"tables": [...]}; each table has `title`, `command`,
`commit`, `machine`, `date`, `columns` and `rows` (lists of cells as they are shown),
and optionally `section` (the page's heading it goes under, in order of first use) and
`note` (a rule or a reason, one or two sentences). Each table on the page is headed
once by its command, commit, machine and date. Add a measurement by adding a table to
the JSON and running this script; never edit docs/performance.md by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from provenance import shown_command  # beside this script in scripts/

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "docs" / "performance.json"
PAGE = ROOT / "docs" / "performance.md"
REQUIRED = ("title", "command", "commit", "machine", "date", "columns", "rows")

INTRO = (
    "Measured speed of the trainer: throughput, where a tick's time goes, the trainer "
    "against plain single-program baselines, devices and placement, sweeps, checkpoints, "
    "compile times and a few learning figures behind the docs' rules. "
    "`scripts/performance.py` writes this page from `docs/performance.json`; do not edit "
    "it by hand. Figures are medians [min–max] over the rounds the command ran, training "
    "SPS excludes compile time, and figures from different machines or days are not "
    "comparable: compare within a table. Learning results of every shipped config are in "
    "[RESULTS.md](RESULTS.md)."
)


def _cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _check(table: dict, index: int) -> None:
    missing = [key for key in REQUIRED if key not in table]
    if missing:
        raise ValueError(f"table {index} ({table.get('title', '?')}): missing {missing}")
    width = len(table["columns"])
    for row in table["rows"]:
        if len(row) != width:
            raise ValueError(
                f"table {index} ({table['title']}): row {row} has {len(row)} "
                f"cells, the table {width} columns"
            )


def render(tables: list[dict]) -> str:
    """The page: tables grouped by section in order of first use, each headed once."""
    for index, table in enumerate(tables):
        _check(table, index)
    sections: dict[str, list[dict]] = {}
    for table in tables:
        sections.setdefault(table.get("section", "Other"), []).append(table)
    lines = ["# Performance", "", INTRO, ""]
    for section, members in sections.items():
        lines += [f"## {section}", ""]
        for table in members:
            heading = (
                f"`{shown_command(table['command'])}` at `{table['commit']}`, "
                f"{table['machine']}, {table['date']}."
            )
            lines += [f"### {table['title']}", "", heading, ""]
            if table.get("note"):
                lines += [table["note"], ""]
            columns = table["columns"]
            lines.append("| " + " | ".join(_cell(c) for c in columns) + " |")
            lines.append("| --- |" + " ---: |" * (len(columns) - 1))
            lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table["rows"]]
            lines.append("")
    return "\n".join(lines)


def load(source: Path = SOURCE) -> list[dict]:
    return json.loads(source.read_text(encoding="utf-8"))["tables"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if the page differs from what would be written",
    )
    parser.add_argument("--source", default=str(SOURCE), help="default: docs/performance.json")
    parser.add_argument("--out", default=str(PAGE), help="default: docs/performance.md")
    args = parser.parse_args(argv)
    page = render(load(Path(args.source)))
    out = Path(args.out)
    if args.check:
        current = out.read_text(encoding="utf-8") if out.is_file() else None
        if current != page:
            print(f"{out} is out of date: run python scripts/performance.py", file=sys.stderr)
            return 1
        return 0
    out.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
