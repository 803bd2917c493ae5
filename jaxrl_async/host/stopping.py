"""How the executor's threads stop: one shared stop event, the first failure that set it,
and queue operations that never block for longer than a poll without looking at it.

Every wait in the executor (a queue's get or put, the wait for parameters) polls the stop
event every POLL seconds, so that an actor that raises, a learner that raises or a stop
asked from outside ends every thread within a poll and the step in progress.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from jaxrl_async.errors import RunFailure, first_line

POLL = 0.05  # seconds between looks at the stop event while waiting


class ActorError(RunFailure):
    """An actor thread failed: its env raised, or gave a non-finite observation or reward.

    The message is one line naming the env, the actor and the exception."""


class RunStop:
    """The stop event every thread watches and the first failure that set it."""

    def __init__(self, event: threading.Event | None = None):
        self.event = event if event is not None else threading.Event()
        self._lock = threading.Lock()
        self._failure: str | None = None

    def is_set(self) -> bool:
        return self.event.is_set()

    def set(self) -> None:
        self.event.set()

    def fail(self, env_name: str, actor: int, error: BaseException) -> None:
        """Record the first actor failure as one line and stop every thread."""
        with self._lock:
            if self._failure is None:
                self._failure = (
                    f"env {env_name}: actor {actor} raised {type(error).__name__}: "
                    f"{first_line(error)}"
                )
        self.event.set()

    def raise_failure(self) -> None:
        """Raise the recorded failure (an ActorError), if any."""
        if self._failure is not None:
            raise ActorError(self._failure)


def put(q: queue.Queue, item: Any, stop: RunStop) -> bool:
    """Put `item` on `q`, waiting for room; False (not put) once `stop` is set."""
    while not stop.is_set():
        try:
            q.put(item, timeout=POLL)
            return True
        except queue.Full:
            continue
    return False


def get(q: queue.Queue, stop: RunStop) -> Any:
    """The next item of `q`; None once `stop` is set."""
    while not stop.is_set():
        try:
            return q.get(timeout=POLL)
        except queue.Empty:
            continue
    return None
