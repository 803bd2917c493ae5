"""Shared test set-up: one persistent XLA cache for the whole suite, its subprocesses included."""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Set before JAX is imported so in-process and CLI-subprocess tests share compiled programs.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(ROOT / ".pytest_cache" / "xla"))

import jaxrl_async  # noqa: E402,F401  (applies the project's XLA flags before JAX starts)


def run_cli(*args, cwd=None, timeout=600, env=None):
    """Run the real `python -m jaxrl_async` in a subprocess; returns CompletedProcess."""
    import subprocess

    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "jaxrl_async", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=full_env)


@pytest.fixture
def cli():
    return run_cli
