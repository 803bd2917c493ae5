"""Hygiene of the shipped text: configs hold only their choices, and code, configs and tests
record no dates or commits (figures and their history live in docs/RESULTS.md and
docs/performance.md, which scripts generate). No JAX program runs here."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = ROOT / "jaxrl_async" / "config" / "yaml"
SCANNED = ("jaxrl_async", "configs", "tests")
SUFFIXES = {".py", ".yaml", ".yml", ".md", ".txt", ".toml", ".cfg", ".json"}

_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)
_YEAR = r"(?:19|20)\d\d"  # any year: a fixture builds its dates instead of writing them
DATE = re.compile(
    rf"\b{_YEAR}-[01]\d-[0-3]\d\b"  # YYYY-MM-DD
    rf"|\b{_MONTH}\.? [0-3]?\d(?:st|nd|rd|th)?,? {_YEAR}\b"  # Month D, YYYY
    rf"|\b[0-3]?\d {_MONTH}\.? {_YEAR}\b"  # D Month YYYY
    rf"|\b{_MONTH} {_YEAR}\b"
)  # Month YYYY
# A standalone lowercase hex word of 7-40 characters with both a digit and a letter: an
# abbreviated or full git commit. Words inside identifiers, paths, 0x literals or longer
# digests do not match.
COMMIT = re.compile(r"(?<![\w./-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")


def _scanned_files():
    seen = set()
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            real = path.resolve()
            if (
                path.suffix in SUFFIXES
                and path.is_file()
                and "__pycache__" not in path.parts
                and real not in seen
            ):
                seen.add(real)
                yield path


def test_scanner_patterns():
    year, commit = "20" + "31", "7" + "4d4830"  # split, so this file holds no match itself
    for text in (
        f"measured {year}-12-02 on",
        f"on Dec 2, {year}",
        f"on 2 December {year}",
        f"in December {year}",
        f"at {commit},",
        f"(commit {commit}c9d1e)",
    ):
        assert DATE.search(text) or COMMIT.search(text), text
    for text in (
        "5000000",
        "0x9e3779b9",
        "a_1b2c3d4e5",
        "path/ab12cd34ef",
        "deadbeef",
        "%Y-%m-%d",
        "1e-3",
        "may 2 ways",
        "a" * 64 + "1",
    ):
        assert not (DATE.search(text) or COMMIT.search(text)), text


def test_no_dates_or_commit_hashes():
    """Code comments, docstrings, config headers and tests state rules, not when something
    was measured or at which commit: dates and commits belong in the generated pages."""
    found = []
    for path in _scanned_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for match in (*DATE.finditer(line), *COMMIT.finditer(line)):
                found.append(f"{path.relative_to(ROOT)}:{number}: {match.group()}")
    assert not found, "dates or commit hashes:\n" + "\n".join(found)


def _minimize_configs():
    spec = importlib.util.spec_from_file_location(
        "minimize_configs", ROOT / "scripts" / "minimize_configs.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_configs_set_no_defaults():
    """A shipped YAML lists only what differs from the dataclass defaults (agent.name and
    env.name always stay); `python scripts/minimize_configs.py` drops the rest."""
    minimize = _minimize_configs()
    found = {
        path.name: keys
        for path in sorted(CONFIG_DIR.glob("*.yaml"))
        if (keys := minimize.redundant_keys(path))
    }
    assert not found, f"keys set to their default (run scripts/minimize_configs.py): {found}"


def test_config_headers_are_short():
    """A config's header says what it is and why, in at most four lines; results live in
    docs/RESULTS.md, speed in docs/performance.md."""
    long = {}
    for path in sorted(CONFIG_DIR.glob("*.yaml")):
        lines = path.read_text().splitlines()
        header = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
        if not 1 <= header <= 4:
            long[path.name] = header
    assert not long, f"config headers of 1-4 comment lines expected: {long}"
