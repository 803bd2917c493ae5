"""CPU XLA flags set before JAX starts its backend.

XLA's concurrency-optimized CPU scheduler (jax 0.10) makes our scanned training
programs slower, doubles their compile time, and can hang a program vmapped over
seeds (threads idle forever after compiling). Measurements are in the README.
We turn it off unless the user already said something about it in XLA_FLAGS.
The flag only affects the CPU backend; XLA reads it when the backend starts, so
it must be in the environment before the first JAX computation.
"""

import os

SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler"


def apply_default_xla_flags() -> None:
    if os.environ.get("JAXRL_ASYNC_KEEP_XLA_FLAGS"):
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if SCHEDULER_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {SCHEDULER_FLAG}=false".strip()
