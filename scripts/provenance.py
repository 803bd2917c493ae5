"""How a generated page shows the command that made its figures: as anyone can run it
from the repository's root on their own machine.

A script records the command line it ran; the pages (docs/RESULTS.md, docs/performance.md)
show it with paths inside the repository relative to its root, and without the options
that only say where it wrote on the machine that ran it (`--out`, `--runs`, `--json` given
a directory outside the repository: scratch; the defaults put the page where the docs keep
it). Any other word stays as written, and the docs' test fails on an absolute path left.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Options that name where a script wrote, not what it ran.
WRITTEN_TO = ("--out", "--runs", "--json")


def _outside(value: str) -> bool:
    return value.startswith("/") and not Path(value).is_relative_to(ROOT)


def _relative(value: str) -> str:
    """`value` relative to the repository's root when it is an absolute path in it."""
    if value.startswith("/") and Path(value).is_relative_to(ROOT):
        return Path(value).relative_to(ROOT).as_posix() or "."
    return value


def shown_command(command: str) -> str:
    """`command` as a page shows it: repository paths relative, scratch outputs dropped.
    The rest stays word for word (a command may carry prose: "(and --envs 64)")."""
    words, shown, at = command.split(), [], 0
    while at < len(words):
        option, eq, value = words[at].partition("=")
        if option.startswith("-") and eq:  # --key=value
            if not (option in WRITTEN_TO and _outside(value)):
                shown.append(f"{option}={_relative(value)}")
            at += 1
        elif option in WRITTEN_TO and at + 1 < len(words) and _outside(words[at + 1]):
            at += 2
        else:
            shown.append(_relative(words[at]))
            at += 1
    return " ".join(shown)
