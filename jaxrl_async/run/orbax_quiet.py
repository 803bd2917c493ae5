"""Orbax's own noise, kept out of the one line a checkpoint error is reported in: its
absl log lines about what it tolerates or raises for, and the stragglers of a failed
concurrent read. Importing this module installs the log filter."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import time


class _DropOrbaxLogs(logging.Filter):
    """Orbax logs what it tolerates through absl at WARNING and ERROR (an unparsable or
    missing _CHECKPOINT_METADATA, which it then ignores) and what it then raises for.
    What matters reaches us as an exception, which the callers turn into one
    CheckpointError line, so its log lines would only add noise to that line or to a
    resume that succeeds; CRITICAL still passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.CRITICAL or f"{os.sep}orbax{os.sep}" not in record.pathname


logging.getLogger("absl").addFilter(_DropOrbaxLogs())


@contextlib.contextmanager
def quiet_failed_reads():
    """Orbax reads the arrays concurrently, and when one read fails it closes its event
    loop while tensorstore still completes the others, which then report "Event loop
    is closed" (unraisable exceptions, from tensorstore's threads) or log
    never-retrieved task errors. The first failure is the one to report: while a
    restore runs, and after it fails until those stragglers stop, drop the rest."""
    dropped = [time.monotonic()]
    previous_hook = sys.unraisablehook

    def hook(unraisable):
        if isinstance(unraisable.exc_value, RuntimeError) and "Event loop is closed" in str(
            unraisable.exc_value
        ):
            dropped.append(time.monotonic())
        else:
            previous_hook(unraisable)

    logger = logging.getLogger("asyncio")
    level = logger.level
    sys.unraisablehook = hook
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    except BaseException:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < min(deadline, dropped[-1] + 0.2):
            time.sleep(0.02)
        gc.collect()
        raise
    finally:
        sys.unraisablehook = previous_hook
        logger.setLevel(level)
