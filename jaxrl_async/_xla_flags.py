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

A host run (`host_cpu_dispatch`, called as one starts) also sets a JAX option that JAX
reads at the same moment, when it makes its CPU client: CPU computations run inline, on
the thread that calls them, instead of being dispatched to XLA's pool
(`jax_cpu_enable_async_dispatch=false`). A host actor calls a small policy once a vector
step while the learner computes; dispatched, the wait for each call's result grew while
the learner was busy, and the HalfCheetah config trained slower (docs/performance.md,
"Host environments"). JAX-env runs keep JAX's dispatch: inline measured no faster for
them, a few percent slower for the small shipped configs ("CPU dispatch").
JAX_CPU_ENABLE_ASYNC_DISPATCH=true or false chooses either way, JAXRL_ASYNC_KEEP_XLA_FLAGS
leaves JAX's default, and where JAX has already computed in the process (a notebook's)
its client exists and keeps its dispatch.
"""

import os

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


def host_cpu_dispatch() -> None:
    """JAX's CPU computations inline for a host run (module docstring), unless the
    environment chooses; effective only before JAX has made its CPU client."""
    if os.environ.get("JAXRL_ASYNC_KEEP_XLA_FLAGS"):
        return
    chosen = os.environ.get(ASYNC_DISPATCH_VAR, "false").lower() not in ("0", "false")
    import jax

    jax.config.update("jax_cpu_enable_async_dispatch", chosen)
