"""Shared test set-up: one persistent XLA cache for the whole suite, its subprocesses included."""

import os
import signal
from pathlib import Path

import pytest

from tests.helpers.cli import TEST_XLA_FLAGS

ROOT = Path(__file__).resolve().parents[1]
# Set before JAX is imported so in-process and CLI-subprocess tests share compiled programs.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(ROOT / ".pytest_cache" / "xla"))
# One CPU device, in-process and in CLI subprocesses, unless a test forces more itself:
# the learning tests' budgets are set for one device, and a machine with another
# core count must compile the same programs (jaxrl_async gives a CPU one device per core
# by default, `_xla_flags`; tests/test_xla_flags.py checks that default).
# The suite's compile-time flags (TEST_XLA_FLAGS) too, where XLA_FLAGS does not set them.
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    _flags += " --xla_force_host_platform_device_count=1"
if "xla_cpu_use_fusion_emitters" not in _flags:
    _flags += f" {TEST_XLA_FLAGS}"
os.environ["XLA_FLAGS"] = _flags.strip()

# A suite started from a background job inherits SIGINT ignored, and Python then installs
# no handler of its own; the interrupt tests need the one a terminal gives a program.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import jaxrl_async  # noqa: E402,F401  (applies the project's XLA flags before JAX starts)
from tests.helpers.cli import USER_LEVEL, run_cli  # noqa: E402


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def optimized_programs(monkeypatch):
    """Every program the test compiles in-process at XLA's default optimisation level, as
    a user's run compiles it, for the tests that run more than they compile (learning,
    long scans): the suite's level compiles faster and runs slower (TEST_XLA_FLAGS)."""
    _add_options(monkeypatch, USER_LEVEL)


@pytest.fixture
def runtime_emitters(monkeypatch):
    """`optimized_programs`, and the training chunks compiled with XLA's default CPU
    fusion emitters too, for the learning tests whose time is spent running them: the
    suite's older emitters (TEST_XLA_FLAGS) compile faster, these run faster."""
    _add_options(monkeypatch, USER_LEVEL, chunk={"xla_cpu_use_fusion_emitters": True})


# The host runs' modules that jit programs.
HOST_MODULES = ("actor", "evaluate", "executor", "replay_learner", "run")


def _add_options(monkeypatch, extra: dict, chunk: dict | None = None) -> None:
    """XLA options `extra` on the programs jaxrl_async jits outside a trace (a jit's own
    options win) and on its training chunks (`compile_chunk`), with `chunk` on the chunks
    alone. Libraries' own jits (optax's, the envs') keep the suite's flags."""
    import importlib
    import sys
    import types

    import jax
    from jax._src.core import trace_state_clean

    from jaxrl_async.pipeline import program as pipeline

    for name in HOST_MODULES:  # imported when a run starts: patched before then
        importlib.import_module(f"jaxrl_async.host.{name}")

    compile_chunk = pipeline.compile_chunk

    def jit_with_options(fun, /, **kwargs):
        if trace_state_clean():  # XLA takes options only for the program it compiles
            kwargs["compiler_options"] = {**extra, **(kwargs.get("compiler_options") or {})}
        return jax.jit(fun, **kwargs)

    def chunk_with_options(fn, state, options=None):
        return compile_chunk(fn, state, {**(options or {}), **extra, **(chunk or {})})

    class Jax(types.ModuleType):  # `jax` as jaxrl_async's modules see it: jit with options
        jit = staticmethod(jit_with_options)

        def __getattr__(self, name):
            return getattr(jax, name)

    ours = Jax("jax")
    for name, module in list(sys.modules.items()):
        if name.startswith("jaxrl_async") and getattr(module, "jax", None) is jax:
            monkeypatch.setattr(module, "jax", ours)
        if name.startswith("jaxrl_async") and hasattr(module, "compile_chunk"):
            monkeypatch.setattr(module, "compile_chunk", chunk_with_options)


# The files with the longest runs (forced-device subprocesses, learning over seeds), longest
# first. `make check` hands whole files to two workers in collection order, so starting these
# first keeps one worker from ending alone on a long file. test_multidevice comes before
# test_split_placement and test_distributed, whose one-device references load
# test_multidevice's programs from the compile cache (same configs, same forced devices)
# once it has compiled them: test_memory starts beside it, so they start after it.
LONG_FIRST = (
    "test_multidevice.py",
    "test_memory.py",
    "test_split_placement.py",
    "test_suite_craftax.py",
    "test_dqn.py",
    "test_r2d2.py",
    "test_host_offpolicy.py",
    "test_gpu_export.py",
    "test_video.py",
    "test_train.py",
    "test_distributed.py",
    "test_resume.py",
    "test_suite_jumanji.py",
    "test_crash_safety.py",
    "test_sac.py",
    "test_pipeline.py",
    "test_host_run.py",
    "test_host_recurrent.py",
    "test_suite_brax.py",
    "test_notebook.py",
    "test_checkpoint.py",
    "test_td3.py",
    "test_host_executor.py",
    "test_suite_xminigrid.py",
    "test_envs.py",
    "test_bench.py",
    "test_replay_prioritized.py",
    "test_custom_env.py",
    "test_sweep.py",
    "test_host_atari.py",
    "test_impala.py",
    "test_image_torsos.py",
    "test_env_traces.py",
    "test_suite_navix.py",
    "test_obs_structures.py",
    "test_pqn.py",
    "test_tracking.py",
    "test_seeds.py",
    "test_report.py",
    "test_results.py",
    "test_eval.py",
)


def pytest_configure(config):
    # pytest-xdist (3.x) sorts files by their number of tests unless told otherwise, which put
    # the long files with few tests (the forced-device subprocesses) last; keep LONG_FIRST's.
    if getattr(config.option, "loadscopereorder", None):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FIRST)))
