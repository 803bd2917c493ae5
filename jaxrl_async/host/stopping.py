"""How the executor's threads stop: one shared stop event, the first failure that set it,
and queue operations that never block for longer than a poll without looking at it.

Every wait in the executor (a queue's get or put, the wait for parameters) polls the stop
event every POLL seconds, so that an actor that raises, a learner that raises or a stop
asked from outside ends every thread within a poll and the step in progress.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from jaxrl_async.errors import EnvOutputError, RunFailure, first_line

POLL = 0.05  # seconds between looks at the stop event while waiting
# The most one poll adds to a wait's count (`get`): longer is the process stopped (Ctrl-Z)
# or the machine suspended, not the wait.
MOST_PER_POLL = 1.0


class ActorError(RunFailure):
    """An actor thread failed: its env raised, or gave a non-finite observation or reward.

    The message is one line naming the env, the actor and the exception."""


class ActorStalled(ActorError):
    """An actor thread handed in no round for env.stall_seconds: its env's step (or
    reset, or its policy) has not returned (`stall.py`). The thread cannot be ended: it is
    left behind, a daemon, and the run ends without it."""


class RunStop:
    """The stop event every thread watches and the first failure that set it."""

    def __init__(self, event: threading.Event | None = None):
        self.event = event if event is not None else threading.Event()
        self._lock = threading.Lock()
        self._failure: RunFailure | None = None
        self.stuck: set[int] = set()  # actors left behind: threads that cannot be joined

    def is_set(self) -> bool:
        return self.event.is_set()

    def set(self) -> None:
        self.event.set()

    def fail(self, env_name: str, actor: int, error: BaseException) -> None:
        """Record the first actor failure as one line and stop every thread."""
        if isinstance(error, EnvOutputError):  # what it returned, against its spaces
            line = f"env {error.env} (actor {actor}) {error.what}"
        else:
            line = (
                f"env {env_name}: actor {actor} raised {type(error).__name__}: {first_line(error)}"
            )
        self._record(ActorError(line))

    def stalled(self, actor: int, failure: RunFailure) -> None:
        """Record `actor`'s stall (`failure`, one line) and stop every thread but that one,
        which is stuck: `stuck` says not to join it."""
        with self._lock:
            self.stuck.add(actor)
        self._record(failure)

    @property
    def failure(self) -> RunFailure | None:
        """The first failure recorded (None: none)."""
        return self._failure

    def record(self, failure: RunFailure) -> None:
        """Record `failure` (one line) as the run's, unless one came first, and stop every
        thread: another process's failure (`processes.py`)."""
        self._record(failure)

    def _record(self, failure: RunFailure) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = failure
        self.event.set()

    def raise_failure(self) -> None:
        """Raise the first failure recorded (an ActorError), if any."""
        if self._failure is not None:
            raise self._failure


def put(q: queue.Queue, item: Any, stop: RunStop) -> bool:
    """Put `item` on `q`, waiting for room; False (not put) once `stop` is set."""
    while not stop.is_set():
        try:
            q.put(item, timeout=POLL)
            return True
        except queue.Full:
            continue
    return False


def get(q: queue.Queue, stop: RunStop, waiting: Callable[[float], None] | None = None) -> Any:
    """The next item of `q`; None once `stop` is set. `waiting(seconds)`, if given, is
    called after each poll that found nothing with the seconds waited so far (each poll
    counting at most MOST_PER_POLL): the stall watch (`stall.py`)."""
    waited, last = 0.0, time.monotonic()
    while not stop.is_set():
        try:
            return q.get(timeout=POLL)
        except queue.Empty:
            if waiting is not None:
                now = time.monotonic()
                waited, last = waited + min(now - last, MOST_PER_POLL), now
                waiting(waited)
    return None
