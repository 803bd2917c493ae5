"""Where a host run's time goes, round by round (the executor's summary and `bench
--profile`)."""

from __future__ import annotations

import math
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


class RoundTimes:
    """Where the time of the rounds after the first went: the learner thread's waiting
    for rounds and learning, the slowest actor's in env.step and in the policy (its
    dispatch among it), and in its rounds in all."""

    def __init__(self) -> None:
        self.started = self.first_done = time.perf_counter()
        self.wait = self.learn = 0.0
        # the slowest actor's ACTOR_TIMES, summed over rounds
        self.actor = dict.fromkeys(ACTOR_TIMES, 0.0)

    def add(self, wait: float, learn: float, record: dict) -> None:
        self.wait, self.learn = self.wait + wait, self.learn + learn
        for key in ACTOR_TIMES:
            self.actor[key] += record[key]

    def stats(self, rounds: int, batch: int) -> dict:
        ended = time.perf_counter()
        return {
            # env steps per second after the first round (whose compiles it leaves out)
            "sps": (rounds - 1) * batch / (ended - self.first_done) if rounds > 1 else math.nan,
            "train_seconds": ended - self.started,
            # the first round: the policy's and the learner's compiles, and its steps
            "compile_seconds": self.first_done - self.started,
            "learner_wait_seconds": self.wait,
            "learn_seconds": self.learn,
            **self.actor,
        }
