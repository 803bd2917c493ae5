"""Tiny Gymnasium envs for the host adapters' tests, with episodes short and exact enough
to place every termination and truncation by hand.

Importing this module registers them with Gymnasium:

- `HostCorridor-v0`: `Corridor` under a TimeLimit of LIMIT steps;
- `HostSpaces-v0`: `SpacesEnv`, whose spaces are its kwargs (the refusal tests);
- `HostFaulty-v0`: `Faulty`, a corridor that raises or goes non-finite (the executor);
- `HostStalling-v0`: `Stalling`, a corridor whose step stops returning (the stall watch);
- `HostBusy-v0`: `Busy`, a corridor whose step spends a set CPU time (the CPU figures);
- `HostSlowClose-v0`: `SlowClose`, a corridor whose close takes a set time (the timings);
- `HostMisshapen-v0`, `HostMisshapenVector-v0`: a corridor, and a vector env of them,
  whose outputs break their declared spaces mid-run.
"""

from __future__ import annotations

import threading
import time

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorWrapper
from gymnasium.wrappers import TimeLimit

LENGTH = 3  # the goal's position
LIMIT = 5  # the TimeLimit
STAY, FORWARD = 0, 1
STEP_REWARD = {STAY: -0.25, FORWARD: 1.0}
GOAL_BONUS = 10.0


class Corridor(gymnasium.Env):
    """A walk to position LENGTH: `FORWARD` moves one cell (reward 1), `STAY` does not
    (reward -0.25); reaching the goal terminates with GOAL_BONUS more. The start, 0 or 1,
    is drawn from the env's seeded generator, so seeds matter.

    The observation is [position, steps taken] (float32), or with `dict_obs` a dict of the
    position as a float64 Box and the steps as a Discrete(start=1) category, which the
    adapter turns into float32 and a one-hot vector. `start_action` offsets the Discrete
    action space (the adapter adds it to the agent's 0-based index)."""

    def __init__(self, dict_obs: bool = False, start_action: int = 0):
        self.dict_obs = dict_obs
        self.action_space = spaces.Discrete(2, start=start_action)
        if dict_obs:
            self.observation_space = spaces.Dict(
                {
                    "position": spaces.Box(0.0, LENGTH, (1,), np.float64),
                    "steps": spaces.Discrete(LIMIT + 1, start=1),
                }
            )
        else:
            self.observation_space = spaces.Box(0.0, np.inf, (2,), np.float32)
        self.position, self.steps = 0, 0

    def _obs(self):
        if self.dict_obs:
            return {"position": np.array([self.position], np.float64), "steps": self.steps + 1}
        return np.array([self.position, self.steps], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position, self.steps = int(self.np_random.integers(0, 2)), 0
        return self._obs(), {}

    def step(self, action):
        move = int(action) - int(self.action_space.start)
        assert move in (STAY, FORWARD), action
        self.position += move
        self.steps += 1
        terminated = self.position >= LENGTH
        reward = STEP_REWARD[move] + (GOAL_BONUS if terminated else 0.0)
        return self._obs(), reward, terminated, False, {}


class SpacesEnv(gymnasium.Env):
    """An env with the spaces it is given; it is only built, never stepped."""

    def __init__(self, observation_space, action_space):
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


for _id, _entry, _limit in (
    ("HostCorridor-v0", Corridor, LIMIT),
    ("HostSpaces-v0", SpacesEnv, None),
):
    if _id not in gymnasium.registry:
        gymnasium.register(id=_id, entry_point=_entry, max_episode_steps=_limit)


class Faulty(Corridor):
    """`Corridor` that fails at its `fail_at`-th step, counted over episodes: it raises
    (`failure="raise"`), or returns a NaN observation (`"nan_obs"`) or reward
    (`"nan_reward"`), or a reward of 1e38 (`"huge_reward"`, which the learner's loss
    overflows on). The executor's failure and the divergence tests use it."""

    def __init__(self, fail_at: int = 10, failure: str = "raise"):
        super().__init__()
        self.fail_at, self.failure, self.total = fail_at, failure, 0

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.total += 1
        if self.total >= self.fail_at:
            if self.failure == "raise":
                raise RuntimeError(f"corridor broke at step {self.total}")
            if self.failure == "nan_obs":
                obs = np.full_like(obs, np.nan)
            elif self.failure == "huge_reward":  # finite, but no loss of it is
                reward = 1e38
            else:
                reward = float("nan")
        return obs, reward, terminated, truncated, info


if "HostFaulty-v0" not in gymnasium.registry:
    gymnasium.register(id="HostFaulty-v0", entry_point=Faulty, max_episode_steps=LIMIT)


class Busy(Corridor):
    """`Corridor` whose every step keeps the CPU busy for `cpu_seconds` of its thread's
    CPU time (not wall time: a step on a loaded machine still spends at least that much):
    a simulator of known cost, for the CPU a run reports."""

    def __init__(self, cpu_seconds: float = 0.001):
        super().__init__()
        self.cpu_seconds = cpu_seconds

    def step(self, action):
        until = time.thread_time() + self.cpu_seconds
        while time.thread_time() < until:
            pass
        return super().step(action)


if "HostBusy-v0" not in gymnasium.registry:
    gymnasium.register(id="HostBusy-v0", entry_point=Busy, max_episode_steps=LIMIT)


class SlowClose(Corridor):
    """`Corridor` whose `close` takes `close_seconds`: a simulator slow to shut down,
    which a run's timed rounds must not count."""

    def __init__(self, close_seconds: float = 1.0):
        super().__init__()
        self.close_seconds = close_seconds

    def close(self):
        time.sleep(self.close_seconds)
        super().close()


if "HostSlowClose-v0" not in gymnasium.registry:
    gymnasium.register(id="HostSlowClose-v0", entry_point=SlowClose, max_episode_steps=LIMIT)


# Set to end every Stalling env's hang in this process (a test's teardown); a process of
# its own never sets it, so its hang lasts.
RELEASE = threading.Event()


class Stalling(Corridor):
    """`Corridor` whose step never returns (until RELEASE is set) from its `hang_at`-th
    step on, counted over episodes, where its first reset's seed is `hang_seeds_from` or
    more (in a run of seed 0, the envs of global index `hang_seeds_from` and after): a
    simulator that stops answering, for the stall watch."""

    def __init__(self, hang_at: int = 10, hang_seeds_from: int = 0):
        super().__init__()
        self.hang_at, self.hang_seeds_from, self.total = hang_at, hang_seeds_from, 0
        self.first_seed: int | None = None

    def reset(self, *, seed=None, options=None):
        if self.first_seed is None:
            self.first_seed = seed
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.total += 1
        if self.total >= self.hang_at and (self.first_seed or 0) >= self.hang_seeds_from:
            RELEASE.wait()
        return super().step(action)


class Misshapen(Corridor):
    """`Corridor` that breaks its declared spaces from its `break_at`-th step on, counted
    over episodes: an observation of shape (3,) in float64 where its episode goes on
    (`broken="obs"`) or where it ends (`"final_obs"`: the observation to bootstrap from),
    or a reward of shape (2,) (`"reward"`)."""

    def __init__(self, break_at: int = 10, broken: str = "obs"):
        super().__init__()
        self.break_at, self.broken, self.total = break_at, broken, 0

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.total += 1
        if self.total >= self.break_at:
            ended = terminated or self.steps >= LIMIT  # LIMIT: TimeLimit truncates it
            if self.broken == ("final_obs" if ended else "obs"):
                obs = np.zeros(3)
            elif self.broken == "reward":
                reward = np.array([reward, reward])
        return obs, reward, terminated, truncated, info


class MisshapenVector(VectorWrapper):
    """Sync vector env of `Corridor`s (same-step autoreset) whose batches break the
    declared spaces from its `break_at`-th step on: observations [B, 1] (`broken="obs"`),
    or rewards [B, 1] (`"rewards"`). A vector entry point as a user may write one."""

    def __init__(self, num_envs: int, break_at: int = 10, broken: str = "obs", **kwargs):
        envs = [lambda: TimeLimit(Corridor(), LIMIT) for _ in range(num_envs)]
        super().__init__(SyncVectorEnv(envs, autoreset_mode=AutoresetMode.SAME_STEP))
        self.break_at, self.broken, self.total = break_at, broken, 0

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        self.total += 1
        if self.total >= self.break_at:
            if self.broken == "obs":
                obs = obs[:, :1]
            else:
                reward = reward[:, None]
        return obs, reward, terminated, truncated, info


for _id, _entry, _vector in (
    ("HostStalling-v0", Stalling, None),
    ("HostMisshapen-v0", Misshapen, None),
    ("HostMisshapenVector-v0", None, MisshapenVector),
):
    if _id not in gymnasium.registry:
        gymnasium.register(
            id=_id, entry_point=_entry, vector_entry_point=_vector, max_episode_steps=LIMIT
        )
