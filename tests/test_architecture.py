"""docs/ARCHITECTURE.md names what exists: every module path it gives is a file of the
package (or of the repository), and every `module.name` or `Class.name` it gives is
defined there. Read from the source (ast), nothing imported."""

import ast
import re
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jaxrl_async"
PAGE = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")

# A path as the page writes one: `run/loop.py`, `agents/`, `tests/test_memory.py`.
PATH = re.compile(
    r"(?<![\w./-])((?:[A-Za-z_][\w]*/)+(?:[A-Za-z_][\w]*\.py)?|[A-Za-z_]\w*\.py)(?![\w/])"
)
# A dotted name in code quotes: `layout.choose_layout`, `Agent.act`, `types.Agent`.
DOTTED = re.compile(r"`([A-Za-z_]\w*)\.([A-Za-z_]\w*)")
FILE_SUFFIXES = {"py", "yaml", "json", "jsonl", "md", "png", "gif", "mp4"}


def _modules() -> dict[str, list[Path]]:
    """Every module of the package by its name (a package by its folder's)."""
    found: dict[str, list[Path]] = {}
    for path in PACKAGE.rglob("*.py"):
        name = path.parent.name if path.name == "__init__.py" else path.stem
        found.setdefault(name, []).append(path)
    return found


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _top_names(path: Path) -> set[str]:
    names = set()
    for node in _tree(path).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _classes() -> dict[str, list[ast.ClassDef]]:
    found: dict[str, list[ast.ClassDef]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(node)
    return found


def _members(node: ast.ClassDef) -> set[str]:
    names = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
        elif isinstance(item, ast.Assign):
            names |= {t.id for t in item.targets if isinstance(t, ast.Name)}
    return names


def _exists(path: str) -> bool:
    """A path from the package or the repository's root; a bare module or folder name
    (a map's entry under its package) anywhere in the package."""
    if (PACKAGE / path).exists() or (ROOT / path).exists():
        return True
    if path.endswith(".py") and "/" not in path:
        return path[:-3] in _modules()
    return path.count("/") == 1 and path.endswith("/") and any(PACKAGE.rglob(path[:-1]))


def _config_keys() -> set[tuple[str, str]]:
    """(section, key) of every config key: the sections' fields and every agent's."""
    sections = {"env", "agent", "pipeline", "replay", "train", "checkpoint", "eval", "logger"}
    fields = set()
    for path in (PACKAGE / "config").glob("*.py"):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ClassDef):
                fields |= {n for n in _members(node) if not n.startswith("_")}
    return {(section, key) for section in sections | {"distributed"} for key in fields}


def _package_names() -> set[str]:
    """What `jaxrl_async.<name>` gives: the package's __all__ and its subpackages."""
    init = PACKAGE / "__init__.py"
    names = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    for node in _tree(init).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            names |= {e.value for e in node.value.elts}  # type: ignore[attr-defined]
    return names


def test_every_path_the_page_gives_exists():
    paths = set(PATH.findall(PAGE))
    assert len(paths) > 40, "the page names the package's modules"
    missing = sorted(p for p in paths if not _exists(p))
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


def test_every_dotted_name_the_page_gives_is_defined():
    modules, classes, keys = _modules(), _classes(), _config_keys()
    checked, missing = 0, []
    for owner, name in set(DOTTED.findall(PAGE)):
        if name in FILE_SUFFIXES or (owner, name) in keys:
            continue  # a file name (`config.yaml`), a config key (`pipeline.lag`)
        if owner == "jaxrl_async":
            checked += 1
            if name not in _package_names():
                missing.append(f"{owner}.{name}")
        elif owner in modules:
            checked += 1
            if not any(name in _top_names(p) for p in modules[owner]):
                missing.append(f"{owner}.{name}")
        elif owner in classes:
            checked += 1
            if not any(name in _members(c) for c in classes[owner]):
                missing.append(f"{owner}.{name}")
    assert checked > 10, "the page names functions and classes of the package"
    assert not missing, f"docs/ARCHITECTURE.md names what is not defined: {sorted(missing)}"


@pytest.mark.parametrize("text", ["`nowhere/missing.py`", "`layout.no_such_function`"])
def test_the_checks_bite(text, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "PAGE", PAGE + text)
    test = (
        test_every_path_the_page_gives_exists
        if text.endswith(".py`")
        else test_every_dotted_name_the_page_gives_is_defined
    )
    with pytest.raises(AssertionError):
        test()
