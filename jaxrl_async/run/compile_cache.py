"""The persistent XLA compile cache: where it lives, and how many programs hit or missed it.

A second start of the same config (a resume, a rerun, a sweep's next group) loads its
programs from the cache instead of compiling them; `CACHE` counts the hits and misses a
run's summary reports.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jaxrl_async" / "xla"


def configure_compile_cache(enabled: bool) -> None:
    """Persistent XLA cache so a second start of the same config skips compiling.

    JAX_COMPILATION_CACHE_DIR (read by JAX itself) wins over our default directory.
    """
    jax.config.update("jax_enable_compilation_cache", enabled)
    if not enabled:
        return
    # A JAX flag, an attribute set at run time that jax.config's type does not declare.
    if not jax.config.jax_compilation_cache_dir:  # type: ignore[attr-defined]
        jax.config.update("jax_compilation_cache_dir", str(default_cache_dir()))
    # Our programs compile in about a second: cache them all, not only the slow ones.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


class CacheCounter:
    """Counts persistent-cache hits and misses (JAX reports them as monitoring events)."""

    def __init__(self):
        self.hits = self.misses = 0
        jax.monitoring.register_event_listener(self._on_event)

    def _on_event(self, event: str, **kwargs) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            self.hits += 1
        elif event == "/jax/compilation_cache/cache_misses":
            self.misses += 1


CACHE = CacheCounter()
