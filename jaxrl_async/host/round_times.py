"""Where a host run's time goes, round by round (the executor's summary and `bench
--profile`), and how much CPU it keeps busy.

`cores_busy` is the CPU seconds of the run's processes (this one: the learner, actor
threads, relays; and its actor processes) over the rounds after the first, per second:
near the cores the run may use (`available_cores`), the run is bound by the CPU, and
overlapping more of it (a lag, more actors) cannot make it faster; only less work per
step or more cores can. `cpu_bound_sps` is that ceiling: the SPS at which the run's CPU
per step would fill every core.
"""

from __future__ import annotations

import math
import os
import time

# A round record's actor times (the slowest actor's): env.step, the policy in all, of the
# policy its calls' dispatch (the rest: waiting for results, `groups.ActorSeconds`), and
# the whole round (those and the actor's own work: the trajectory, its episodes).
ACTOR_TIMES = (
    "actor_env_seconds",
    "actor_policy_seconds",
    "actor_dispatch_seconds",
    "actor_round_seconds",
)

# What a run's summary says of its CPU (`RoundTimes.stats`).
CPU_FIGURES = ("cores_busy", "cores", "cpu_bound_sps")


def available_cores() -> int:
    """The CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class RoundTimes:
    """Where the time of the rounds after the first went: the learner thread's waiting
    for rounds and learning, the slowest actor's in env.step and in the policy (its
    dispatch among it), and in its rounds in all; and the CPU the run's processes spent."""

    def __init__(self) -> None:
        self.started = self.first_done = time.perf_counter()
        self.first_cpu = self.last_cpu = time.process_time()
        self.last_done = self.started
        self.wait = self.learn = 0.0
        # the slowest actor's ACTOR_TIMES, summed over rounds
        self.actor = dict.fromkeys(ACTOR_TIMES, 0.0)
        self.actor_process_cpu = 0.0  # the actor processes' CPU seconds, all of them

    def first_round_done(self) -> None:
        """Mark the end of the first round: what follows is timed."""
        self.first_done, self.first_cpu = time.perf_counter(), time.process_time()
        self.last_done, self.last_cpu = self.first_done, self.first_cpu

    def add(self, wait: float, learn: float, record: dict, actor_process_cpu: float) -> None:
        """A timed round: the learner's wait and learning, the round's record (its
        ACTOR_TIMES) and the CPU seconds its actor processes report (0 for threads)."""
        self.wait, self.learn = self.wait + wait, self.learn + learn
        for key in ACTOR_TIMES:
            self.actor[key] += record[key]
        self.actor_process_cpu += actor_process_cpu
        # the timed figures end with the last round (not with closing the actors after it)
        self.last_done, self.last_cpu = time.perf_counter(), time.process_time()

    def stats(self, rounds: int, batch: int, local_batch: int | None = None) -> dict:
        """The figures of `rounds` rounds of `batch` env steps (the run's, all processes');
        the CPU ones of this process and its actor processes, which step `local_batch`
        (a run of several processes: its share; None: all of `batch`)."""
        ended = time.perf_counter()
        local = batch if local_batch is None else local_batch
        timed = self.last_done - self.first_done
        cpu = self.last_cpu - self.first_cpu + self.actor_process_cpu
        cores = available_cores()
        return {
            # env steps per second from the first round's end (its compiles left out) to
            # the last's (not the actors' shutdown after it)
            "sps": (rounds - 1) * batch / timed if rounds > 1 else math.nan,
            "train_seconds": ended - self.started,
            # the first round: the policy's and the learner's compiles, and its steps
            "compile_seconds": self.first_done - self.started,
            "learner_wait_seconds": self.wait,
            "learn_seconds": self.learn,
            **self.actor,
            # the CPU seconds of the run's processes over the timed rounds, per second
            "cores_busy": cpu / timed if rounds > 1 else math.nan,
            "cores": cores,
            # the SPS at which this CPU per step would keep every core busy
            "cpu_bound_sps": (rounds - 1) * local * cores / cpu if rounds > 1 else math.nan,
        }
