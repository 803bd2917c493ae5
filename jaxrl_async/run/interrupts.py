"""Ctrl-C and SIGTERM in a training loop: deferred to the next host-call boundary, where
the loop saves a checkpoint and stops."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any


@contextlib.contextmanager
def interrupts_between_calls(on_signal: Callable[[], None] | None = None):
    """Yields `interrupted() -> bool`: SIGINT and SIGTERM set it (and call `on_signal`,
    which may set a stop event other threads watch) instead of raising.

    Only signals a Python handler catches (Ctrl-C's default, the CLI's handlers) are
    deferred to the next host-call boundary, where the loop saves and stops; a second
    one goes to that handler at once. SIG_DFL / SIG_IGN are left alone, as is
    everything off the main thread.
    """
    received: list[int] = []
    previous: dict[signal.Signals, Callable[[int, FrameType | None], Any]] = {}

    def handler(signum, frame):
        if received:
            previous[signum](signum, frame)
        received.append(signum)
        if on_signal is not None:
            on_signal()

    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            current = signal.getsignal(signum)
            if callable(current):
                previous[signum] = current
                signal.signal(signum, handler)
    try:
        yield lambda: bool(received)
    finally:
        for signum, current in previous.items():
            signal.signal(signum, current)
