"""The package as users install it: a wheel built from the tree holds what pip users need
besides the modules (the shipped configs, the PEP 561 marker that tells their type
checkers to read our annotations)."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # builds a wheel in a fresh process
def test_a_wheel_built_from_the_tree_is_typed_and_ships_the_configs(tmp_path):
    # A copy of what the build reads, so the build leaves nothing in the checkout.
    src = tmp_path / "src"
    shutil.copytree(
        ROOT / "jaxrl_async", src / "jaxrl_async", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    build = (
        "import sys; from setuptools import build_meta; print(build_meta.build_wheel(sys.argv[1]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", build, str(tmp_path / "dist")],
        cwd=src,
        capture_output=True,
        text=True,
        check=True,
    )
    wheel = tmp_path / "dist" / out.stdout.strip().splitlines()[-1]
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "jaxrl_async/py.typed" in names
    shipped = {
        p.relative_to(ROOT).as_posix() for p in (ROOT / "jaxrl_async").glob("config/yaml/*.yaml")
    }
    assert shipped and shipped <= names
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "jaxrl_async").rglob("*.py")}
    assert modules <= names and not any("__pycache__" in n for n in names)  # every subpackage
