"""Drop the keys of the shipped config YAMLs that equal their dataclass's default.

A shipped config holds only what differs from the defaults (jaxrl_async/config/loader.py for
env, pipeline, replay, train, checkpoint and eval; the agent's class in
jaxrl_async/config/agents.py, chosen by agent.name), so that it reads as the list of its
choices. `agent.name` and `env.name` always stay. The header comment, key order and the
remaining lines are kept as written; a section left empty is dropped.

    python scripts/minimize_configs.py           # rewrite the YAMLs in place
    python scripts/minimize_configs.py --check   # list the redundant keys, exit 1 if any
    python scripts/minimize_configs.py --against REV  # each config as of git REV loads to
                                                      # the same Config as the tree's

Every config loads to the same `Config` before and after (the script checks this
before it writes).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from omegaconf import OmegaConf

from jaxrl_async.config.agents import AGENT_CONFIGS
from jaxrl_async.config.loader import CONFIG_DIR, Config, load_config

KEEP = {("agent", "name"), ("env", "name")}


def _default_section(config: Config, section: str):
    """The section's dataclass as constructed with no arguments."""
    if section == "agent":
        return AGENT_CONFIGS[config.agent.name]()
    return type(getattr(config, section))()


def redundant_keys(path: Path) -> list[str]:
    """`section.key` of every key `path` sets to its default, in file order."""
    raw = OmegaConf.to_container(OmegaConf.load(path))
    config = load_config(path)
    found = []
    for section, keys in raw.items():
        if section not in Config.SECTIONS or not isinstance(keys, dict):
            continue
        default = _default_section(config, section)
        for key in keys:
            if (section, key) in KEEP:
                continue
            if getattr(getattr(config, section), key) == getattr(default, key):
                found.append(f"{section}.{key}")
    return found


def minimized(text: str, drop: set[str]) -> str:
    """`text` without the lines of the `section.key`s in `drop` (and their nested lines),
    and without sections left empty. Works on the shipped layout: sections at column 0,
    their keys indented two spaces, nested values deeper."""
    out: list[str] = []
    section = None
    skipping = False
    for line in text.splitlines(keepends=True):
        indent = len(line) - len(line.lstrip(" "))
        stripped = line.strip()
        if indent == 0 and stripped and not stripped.startswith("#"):
            section, skipping = stripped.split(":", 1)[0], False
        elif indent == 2 and stripped and not stripped.startswith("#"):
            skipping = f"{section}.{stripped.split(':', 1)[0]}" in drop
        if not (skipping and indent >= 2):
            out.append(line)
    # A section header followed by no indented line is empty: drop it.
    kept = []
    for i, line in enumerate(out):
        is_header = line[:1] not in ("", " ", "#", "\n") and line.rstrip().endswith(":")
        nxt = out[i + 1] if i + 1 < len(out) else ""
        if is_header and not nxt.startswith("  "):
            continue
        kept.append(line)
    return "".join(kept)


def differing_from(rev: str) -> list[str]:
    """The shipped configs whose YAML as of git `rev` loads, with today's code, to another
    Config than the tree's: a changed default shows here."""
    differ = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted(CONFIG_DIR.glob("*.yaml")):
            shown = subprocess.run(
                ["git", "show", f"{rev}:jaxrl_async/config/yaml/{path.name}"],
                capture_output=True,
                text=True,
                cwd=CONFIG_DIR,
                check=False,
            )
            if shown.returncode:  # not shipped at `rev`
                continue
            old = Path(tmp) / path.name
            old.write_text(shown.stdout)
            if load_config(old) != load_config(path):
                differ.append(path.name)
    return differ


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="list redundant keys and exit 1 if any; write nothing"
    )
    parser.add_argument(
        "--against",
        metavar="REV",
        help="compare every config with its YAML as of git REV; write nothing",
    )
    args = parser.parse_args(argv)
    if args.against:
        differ = differing_from(args.against)
        print(
            f"differ from {args.against}: {', '.join(differ)}"
            if differ
            else f"every config loads as at {args.against}"
        )
        return 1 if differ else 0
    status = 0
    for path in sorted(CONFIG_DIR.glob("*.yaml")):
        drop = redundant_keys(path)
        if not drop:
            continue
        if args.check:
            print(f"{path.name}: {', '.join(drop)}")
            status = 1
            continue
        text = minimized(path.read_text(), set(drop))
        with tempfile.TemporaryDirectory() as tmp:
            candidate = Path(tmp) / path.name  # same stem, so the same Config.name
            candidate.write_text(text)
            if load_config(candidate) != load_config(path):
                print(f"{path.name}: minimizing would change the config; left as is")
                status = 1
                continue
        path.write_text(text)
        print(f"{path.name}: dropped {len(drop)} keys")
    return status


if __name__ == "__main__":
    sys.exit(main())
