"""The docs stay true: links and anchors resolve, every `jaxrl-async` command shown parses
(and its config loads with its overrides), the README's figures are docs/RESULTS.md's,
and docs/performance.md is what scripts/performance.py writes. Nothing here trains or
compiles."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`+[^`]*`+")


def _prose_and_code(text: str) -> tuple[list[str], list[str]]:
    """The lines outside fenced code blocks, and those inside them."""
    prose: list[str] = []
    code: list[str] = []
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        (code if fenced else prose).append(line)
    return prose, code


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text lowercased, punctuation other than '-' and
    '_' removed, spaces turned into '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    prose, _ = _prose_and_code(page.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    found = set()
    for line in prose:
        match = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    prose, _ = _prose_and_code(page.read_text(encoding="utf-8"))
    return [m.group(1) for line in prose for m in LINK.finditer(CODE_SPAN.sub("", line))]


def test_slug_follows_github():
    assert slug("Checkpoints and resume") == "checkpoints-and-resume"
    assert slug("Memory: recurrent policies") == "memory-recurrent-policies"
    assert slug("`ppo_cartpole` at lags 0-2, PQN's") == "ppo_cartpole-at-lags-0-2-pqns"
    assert slug("Env suite adapters, 512 envs") == "env-suite-adapters-512-envs"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no file {resolved}")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading with anchor #{anchor} in {resolved.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def commands() -> list[tuple[str, str, str | None]]:
    """(page, command line, the error it shows or None) for every `jaxrl-async ...` line in
    a code block; a line right after it that starts `jaxrl-async: error:` is its error."""
    found = []
    for page in PAGES:
        _, code = _prose_and_code(page.read_text(encoding="utf-8"))
        for line, after in zip(code, [*code[1:], ""]):
            if "jaxrl-async" not in line:
                continue
            try:
                words = shlex.split(line.strip().removeprefix("$ "), comments=True)
            except ValueError:
                continue
            if any(Path(w).name == "jaxrl-async" for w in words):
                error = after.partition("jaxrl-async: error:")[2].strip() or None
                found.append((page.name, line.strip(), error))
    return found


COMMANDS = commands()


def _argv(line: str) -> list[str]:
    words = shlex.split(line.removeprefix("$ "), comments=True)
    start = next(i for i, w in enumerate(words) if Path(w).name == "jaxrl-async")
    return words[start + 1 :]


def test_the_docs_show_commands():
    shown = {page for page, _, _ in COMMANDS}
    assert {"README.md", "configuration.md", "operations.md", "devices.md"} <= shown
    assert len(COMMANDS) >= 30


@pytest.mark.parametrize("page,line,error", COMMANDS, ids=[f"{p}:{c[:60]}" for p, c, _ in COMMANDS])
def test_command_parses_and_its_overrides_load(page, line, error):
    from jaxrl_async.errors import UserError

    if error is None:
        _check_command(page, line)
        return
    with pytest.raises(UserError) as raised:  # the page shows this command failing
        _check_command(page, line)
    assert str(raised.value) == error, f"{page}: `{line}` fails otherwise than shown"


def _check_command(page: str, line: str) -> None:
    from jaxrl_async.cli import build_parser
    from jaxrl_async.config.loader import available_configs, load_config

    argv = _argv(line)
    if not argv or {"-h", "--help"} & set(argv):
        return  # `jaxrl-async --help` prints and exits 0; nothing to check beyond the parser
    if argv[0] == "bench" and argv[1:2] != ["--"]:  # as cli.main passes the bench its flags
        argv = ["bench", "--", *argv[1:]]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = build_parser().parse_args(argv)
    except SystemExit as e:
        pytest.fail(f"{page}: `{line}` does not parse (exit {e.code}): {err.getvalue().strip()}")

    overrides = list(getattr(args, "overrides", []) or [])
    config = getattr(args, "config", None)
    if config and "=" in config:  # `train env.num_envs=8`: the default config, as in cli.main
        overrides.insert(0, config)
        config = "ppo_cartpole"
    if args.command == "resume":  # `resume RUN_DIR total_steps=N`, as in cli._resume
        overrides = [f"train.{o}" if o.split("=", 1)[0] == "total_steps" else o for o in overrides]
    if args.command == "train" and config in available_configs():
        load_config(config, overrides)
    elif args.command == "sweep" and config in available_configs():
        from jaxrl_async.training.sweeps import split_overrides

        plain, grid = split_overrides(overrides, lambda o: load_config(config, o))
        assert grid, f"{page}: `{line}` sweeps nothing"
        load_config(config, plain)
    elif overrides:  # a run's own config (resume, a YAML file): well-formed, valid keys
        load_config("ppo_cartpole", overrides)


def _performance_script():
    spec = importlib.util.spec_from_file_location(
        "performance", ROOT / "scripts" / "performance.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_performance_page_is_what_the_script_writes():
    assert _performance_script().main(["--check"]) == 0, (
        "docs/performance.md is stale: run python scripts/performance.py"
    )


def test_performance_check_finds_a_stale_page(tmp_path):
    performance = _performance_script()
    source = json.loads((ROOT / "docs" / "performance.json").read_text(encoding="utf-8"))
    for table in source["tables"]:
        assert set(performance.REQUIRED) <= set(table), table.get("title")
        assert all(len(row) == len(table["columns"]) for row in table["rows"]), table["title"]
    out = tmp_path / "performance.md"
    args = ["--source", str(ROOT / "docs" / "performance.json"), "--out", str(out)]
    assert performance.main(["--check", *args]) == 1  # missing
    assert performance.main(args) == 0
    assert performance.main(["--check", *args]) == 0
    page = out.read_text(encoding="utf-8")
    for table in source["tables"]:  # each table headed once by its command, commit, date
        assert page.count(f"`{table['command']}` at `{table['commit']}`") == 1
        assert table["date"] in page and table["machine"] in page
    out.write_text(page.replace("|", "/", 1), encoding="utf-8")
    assert performance.main(["--check", *args]) == 1
    broken = {"tables": [{"title": "t", "columns": ["a"], "rows": [["1"]]}]}
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match="missing"):
        performance.main(["--source", str(tmp_path / "broken.json"), "--out", str(out)])


def test_readme_is_a_short_guide_without_dates_or_commits():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert not re.findall(r"\b20\d\d-[01]\d-[0-3]\d\b", text)
    hashes = [
        w
        for w in re.findall(r"\b[0-9a-f]{7,40}\b", text)
        if re.search(r"[a-f]", w) and re.search(r"\d", w)
    ]
    assert not hashes, hashes
    for target in ("make train", "make test", "make check"):
        assert target in "\n".join(text.splitlines()[:10])


def _table_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        match = re.match(r"^\| `([\w.-]+)` \|", line)
        if match:
            rows[match.group(1)] = [c.strip() for c in line.strip().strip("|").split("|")]
    return rows


def test_readme_results_are_those_of_results_md():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    header = next(
        line
        for line in readme.splitlines()
        if line.startswith("| config |") and "final return" in line
    )
    columns = [c.strip() for c in header.strip().strip("|").split("|")]
    shown = _table_rows(readme.split(header, 1)[1].split("\n\n", 1)[0])
    assert len(shown) >= 5
    results_md = (ROOT / "docs" / "RESULTS.md").read_text(encoding="utf-8")
    results_header = next(line for line in results_md.splitlines() if line.startswith("| config |"))
    results_columns = [c.strip() for c in results_header.strip().strip("|").split("|")]
    results = _table_rows(results_md)
    for name, cells in shown.items():
        assert name in results, f"README shows {name}, which docs/RESULTS.md has no row for"
        for column, cell in zip(columns[1:], cells[1:]):
            match = [c for c in results_columns if c == column or c.startswith(column)]
            assert match, f"README column {column!r} is not in docs/RESULTS.md"
            expected = results[name][results_columns.index(match[0])]
            assert cell == expected, f"{name} {column}: README {cell!r}, RESULTS.md {expected!r}"


def test_help_speaks_to_a_user_and_its_examples_work():
    from jaxrl_async.cli import build_parser

    parser = build_parser()
    text = parser.format_help()
    assert "actor-learner" in text and "docs/" in text and "examples:" in text
    examples = [
        line.strip()
        for line in (parser.epilog or "").splitlines()
        if line.strip().startswith("jaxrl-async ")
    ]
    assert len(examples) >= 3
    for line in examples:
        _check_command("jaxrl-async --help", line)


# An absolute path as a command's word: a slash after a space, a quote, `=` or a backtick.
ABSOLUTE_PATH = re.compile(r"(?:^|[\s`'\"=(])(/[\w.-]+(?:/[\w.-]+)+)")


@pytest.mark.parametrize(
    "page", ["RESULTS.md", "results.json", "performance.md", "performance.json"]
)
def test_generated_pages_show_no_machine_local_path(page):
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    found = ABSOLUTE_PATH.findall(text)
    assert not found, f"docs/{page} shows paths of the machine that made it: {found[:3]}"


def test_a_shown_command_is_runnable_from_the_repository_root():
    from provenance import shown_command

    assert ABSOLUTE_PATH.findall("x --out /work/exp/a") == ["/work/exp/a"]  # the check bites
    command = (
        f"python scripts/results.py --seeds 3 --out /work/exp/a --runs=/tmp/r --json {ROOT}/b.json"
    )
    # Scratch outputs elsewhere are dropped; one inside the repository is made relative.
    assert shown_command(command) == "python scripts/results.py --seeds 3 --json b.json"
    assert shown_command(f"x --config={ROOT}/c.yaml {ROOT}") == "x --config=c.yaml ."
    # Counts and prose stay word for word; a path that is no output is left for the check.
    kept = "bench.py --runs 3 (and --envs 64), rounds --cache /opt/c"
    assert shown_command(kept) == kept
