"""The learner's parameters as the actors see them: a store of versions by round.

Round r is the r-th trajectory of every actor, which the learner consumes in its r-th
update step. Slot r of the store holds what the learner had after consuming r rounds:
its parameters (with the observation statistics under env.normalize_obs) and their
version, the learner's update count (an update skipped for staleness leaves the version
where it was, as in the JAX pipeline). At lag L, round i is
acted by slot max(0, i - L), so that after the first L rounds the data every update
consumes is exactly L updates old, as `ticks.make_async_tick` makes it; lag 0 waits for
the newest parameters. The store keeps the last L + 1 slots, all an actor can still ask
for: the learner publishes slot n only once every actor handed in round n - 1.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from jaxrl_async.host.stopping import POLL, RunStop


class Published(NamedTuple):
    params: Any  # the learner's parameters (on the learner's device)
    version: int  # the learner's update count when they were published
    obs_stats: Any = None  # env.normalize_obs: the observation statistics (obs_norm.py)


class ParamStore:
    """Slots of published parameters; actors wait for the slot their round acts with."""

    def __init__(self, lag: int, first_round: int = 0):
        self.lag, self.first_round = lag, first_round
        self._slots: dict[int, Published] = {}
        self._cond = threading.Condition()

    def slot_of(self, round_index: int) -> int:
        """The slot whose parameters act round `round_index` (a resumed run's first slot
        is the round it resumes at: the restored parameters act its first L rounds)."""
        return max(self.first_round, round_index - self.lag)

    def publish(self, slot: int, params: Any, version: int, obs_stats: Any = None) -> None:
        with self._cond:
            self._slots[slot] = Published(params, version, obs_stats)
            for old in [s for s in self._slots if s < slot - self.lag]:
                del self._slots[old]
            self._cond.notify_all()

    def wait(self, slot: int, stop: RunStop) -> Published | None:
        """The parameters of `slot`, once published; None once `stop` is set."""
        with self._cond:
            while slot not in self._slots:
                if stop.is_set():
                    return None
                if self._slots and slot < min(self._slots):
                    raise RuntimeError(f"parameter slot {slot} was dropped before it acted")
                self._cond.wait(POLL)
            return self._slots[slot]
