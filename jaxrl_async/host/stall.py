"""The learner's watch on its actors: a simulator that stops answering (an env whose step
never returns: a deadlock, a lost remote) ends the run in one line instead of stalling it.

The learner takes round r of each actor in turn (`executor.next_round`). While it waits
for actor k, actor k waits on nothing of the learner's: the parameters its round acts
with were published before that round was asked for, and its queue has room. So a wait
is that actor's own: its env, its policy (compiled on its first call) or the machine.
A wait for one actor's round that lasts `env.stall_seconds` (0: never) ends the run with
an ActorStalled, a RunFailure of one line naming the actor, its env and where it is stuck
(each actor marks where it is, `Doing`): exit 1, the checkpoints kept, the resume hint.
A warning line comes at half of it.

A thread stuck in a call cannot be ended from Python: it is a daemon, left behind and not
joined (`RunStop.stuck`), so that the process still exits; should its call ever return,
it sees the stop and ends. Time counts while the learner polls, a poll counting at most
`stopping.MOST_PER_POLL`: a process stopped (Ctrl-Z) or a suspended machine is no stall.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import ClassVar

from jaxrl_async.host.stopping import ActorStalled, RunStop

# Where an actor is (`Doing.now`), as the stall line says it.
STUCK = {
    "reset": "its env's reset has not returned",
    "step": "its env's step has not returned",
    "policy": "its policy (the agent's act, compiled on its first call) has not returned",
}
ELSEWHERE = "it has not finished its round"


def _shown(seconds: float) -> str:
    return f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.2g}"


class Doing:
    """Where an actor thread is, for the stall line: the actor sets `now` as it goes
    ("reset", "policy", "step"; "round" between them)."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = "round"


class SharedDoing(Doing):
    """Where an actor process is (`actor_process.py`), as a `Doing` on both sides: one
    byte of a file that the run's process and the child both map, written by the child's
    actor and read by the run's stall watch. `SharedDoing()` makes the file; the child
    maps it by `path`, after which the run removes it (`unlink`): the maps stay."""

    __slots__ = ("_map", "path")
    PLACES: ClassVar = ("round", "reset", "policy", "step")
    _CODES: ClassVar = {place: code for code, place in enumerate(PLACES)}  # set each step

    def __init__(self, path: str | None = None):
        if path is None:
            handle, path = tempfile.mkstemp(prefix="jaxrl-async-actor-")
            os.write(handle, bytes(1))
            os.close(handle)
        self.path = path
        with open(path, "r+b") as f:
            self._map = mmap.mmap(f.fileno(), 1)

    @property
    def now(self) -> str:
        return self.PLACES[self._map[0]]

    @now.setter
    def now(self, place: str) -> None:
        self._map[0] = self._CODES[place]

    def unlink(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class StallWatch:
    """The learner's watch over its waits for rounds (`seconds` 0: none)."""

    def __init__(
        self,
        seconds: float,
        env_names: Sequence[str],
        doing: Sequence[Doing],
        stop: RunStop,
        warn: Callable[[str], None],
    ):
        self.seconds, self.env_names, self.doing = seconds, env_names, doing
        self.stop, self.warn = stop, warn

    def line(self, actor: int, seconds: float) -> str:
        stuck = STUCK.get(self.doing[actor].now, ELSEWHERE)
        return (
            f"actor {actor} ({self.env_names[actor]}) handed in no round for {_shown(seconds)} s "
            f"(env.stall_seconds): {stuck}"
        )

    def waiting(self, actor: int) -> Callable[[float], None] | None:
        """What the learner's wait for one round of `actor` calls after each empty poll
        with the seconds waited (`stopping.get`): a warning at half of `seconds`, the
        stall at `seconds`. None without a watch."""
        if self.seconds <= 0:
            return None
        warned = False

        def check(waited: float) -> None:
            nonlocal warned
            if waited >= self.seconds:
                self.stop.stalled(actor, ActorStalled(self.line(actor, self.seconds)))
            elif not warned and waited >= self.seconds / 2:
                warned = True
                ends = f"the run ends at {_shown(self.seconds)} s"
                self.warn(f"warning: {self.line(actor, waited)}; {ends}")

        return check
