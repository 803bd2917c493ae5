"""CPU XLA flags set before JAX starts its backend.

XLA reads XLA_FLAGS when its CPU backend starts, so these must be in the environment
before the first JAX computation; each is added only where XLA_FLAGS does not already
say something about it, and none with JAXRL_ASYNC_KEEP_XLA_FLAGS set. The benchmarks
behind both are in docs/performance.md.

- XLA's concurrency-optimized CPU scheduler (jax 0.10) makes our scanned training
  programs slower, lengthens their compile time, and can hang a program vmapped over
  seeds (threads idle forever after compiling): off.
- One CPU device per core (at most MAX_CPU_DEVICES): as devices, the cores take parts
  of the batch, which made several small learners faster on two cores (docs/performance.md,
  "Devices and placement").
  `layout.choose_devices` picks how many a run uses; `pipeline.devices=1` keeps one.
  Only the CPU platform's device count changes; on a GPU host the GPUs are the devices.

One JAX setting is read at the same moment, when JAX makes its CPU client, and is left
alone with JAXRL_ASYNC_KEEP_XLA_FLAGS; JAX_CPU_ENABLE_ASYNC_DISPATCH=true (or false)
chooses it:

- CPU computations run inline, on the thread that calls them, instead of being
  dispatched to XLA's pool (`jax_cpu_enable_async_dispatch=false`). A host actor calls a
  small policy once a vector step while the learner computes; dispatched, a call cost
  several times its inline price whenever the learner was busy, and the policy, not the
  simulator, bounded the host run. The JAX pipeline's training SPS measured the same
  either way (docs/performance.md, "CPU dispatch").
"""

import importlib.abc
import importlib.util
import os
import sys

SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler"
DEVICES_FLAG = "--xla_force_host_platform_device_count"
ASYNC_DISPATCH_VAR = "JAX_CPU_ENABLE_ASYNC_DISPATCH"
# One device per core is benchmarked on small CPUs only; more devices than this are left
# to XLA_FLAGS.
MAX_CPU_DEVICES = 8


def cpu_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def apply_default_xla_flags() -> None:
    if os.environ.get("JAXRL_ASYNC_KEEP_XLA_FLAGS"):
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if SCHEDULER_FLAG not in flags:
        flags = f"{flags} {SCHEDULER_FLAG}=false"
    devices = min(cpu_cores(), MAX_CPU_DEVICES)
    if DEVICES_FLAG not in flags and devices > 1:
        flags = f"{flags} {DEVICES_FLAG}={devices}"
    os.environ["XLA_FLAGS"] = flags.strip()
    _cpu_dispatch_inline()


def _cpu_dispatch_inline() -> None:
    """CPU computations inline unless JAX_CPU_ENABLE_ASYNC_DISPATCH says otherwise. JAX
    reads no environment variable for this setting, only its config, which exists once
    JAX is imported: set now where JAX was imported first, else as JAX's own import
    ends. Either way it counts only before JAX makes its CPU client, as XLA_FLAGS does."""
    chosen = os.environ.get(ASYNC_DISPATCH_VAR, "false").lower() not in ("0", "false")
    if "jax" in sys.modules:
        sys.modules["jax"].config.update("jax_cpu_enable_async_dispatch", chosen)
    elif not any(isinstance(f, _WhenJaxImported) for f in sys.meta_path):
        sys.meta_path.insert(0, _WhenJaxImported(chosen))


class _WhenJaxImported(importlib.abc.MetaPathFinder):
    """Finds nothing itself: on the import of `jax` it lets the usual finders find it
    and makes its loader set the dispatch setting once the module has run."""

    def __init__(self, asynchronous: bool):
        self.asynchronous = asynchronous

    def find_spec(self, name, path=None, target=None):
        if name != "jax":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module
        asynchronous = self.asynchronous

        def exec_module(module) -> None:
            run(module)
            module.config.update("jax_cpu_enable_async_dispatch", asynchronous)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
