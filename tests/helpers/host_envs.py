"""Tiny Gymnasium envs for the host adapters' tests, with episodes short and exact enough
to place every termination and truncation by hand.

Importing this module registers them with Gymnasium:

- `HostCorridor-v0`: `Corridor` under a TimeLimit of LIMIT steps;
- `HostSpaces-v0`: `SpacesEnv`, whose spaces are its kwargs (the refusal tests);
- `HostFaulty-v0`: `Faulty`, a corridor that raises or goes non-finite (the executor).
"""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces

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
