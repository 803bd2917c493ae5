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


# The files with the longest runs (learning over seeds, subprocesses on forced devices), longest
# first. `make test` hands whole files to two workers in collection order, so starting these
# first keeps one worker from ending alone on a long file.
LONG_FIRST = ("test_suite_craftax.py", "test_sac.py", "test_suite_jumanji.py", "test_dqn.py",
              "test_suite_xminigrid.py", "test_suite_brax.py", "test_distributed.py", "test_multidevice.py",
              "test_split.py", "test_pipeline.py", "test_train.py", "test_checkpoint.py",
              "test_impala.py", "test_memory.py", "test_seeds.py", "test_custom_env.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FIRST)))
