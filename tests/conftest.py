"""Shared test set-up: one CPU device and one persistent XLA cache for the whole suite,
its subprocesses included."""

import os
import signal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Set before JAX is imported so in-process and CLI-subprocess tests share compiled programs.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(ROOT / ".pytest_cache" / "xla"))
# One CPU device, in-process and in CLI subprocesses, unless a test forces more itself:
# the learning tests' budgets are set for one device, and a machine with another
# core count must compile the same programs (jaxrl_async gives a CPU one device per core
# by default, `_xla_flags`; tests/test_xla_flags.py checks that default).
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=1"
    ).strip()

# A suite started from a background job inherits SIGINT ignored, and Python then installs
# no handler of its own; the interrupt tests need the one a terminal gives a program.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import jaxrl_async  # noqa: E402,F401  (applies the project's XLA flags before JAX starts)
from tests.helpers.cli import run_cli  # noqa: E402


@pytest.fixture
def cli():
    return run_cli
