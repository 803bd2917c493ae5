"""Host-executor runs as the tests drive them: in a thread that must end in bounded time,
with another actor-thread count, the learning tests' seeds on Gymnasium's CartPole, and
the tiny DQN on the corridor with corridor-shaped trajectories (the off-policy tests)."""

from __future__ import annotations

import dataclasses
import threading

import jax
import numpy as np

from jaxrl_async.config.loader import load_config
from jaxrl_async.types import ActOutput, Transition

BOUND = 30.0  # seconds any executor run may take before it counts as a hang

# The tiny corridor of tests/helpers/host_envs.py, named as a user names their own env.
CORRIDOR = "gymnasium:tests.helpers.host_envs:HostCorridor-v0"
# A small PPO on it: 16 env steps a round, records every 2 rounds.
SMALL = [
    "env.num_envs=4",
    "pipeline.rollout_len=4",
    "agent.hidden_sizes=[8]",
    "agent.num_minibatches=2",
    "train.log_every=32",
    "train.progress=false",
]


def bounded(fn, seconds: float = BOUND):
    """fn() in a thread that must end within `seconds`: its result, or what it raised."""
    out: dict = {}

    def target():
        try:
            out["result"] = fn()
        except BaseException as e:  # noqa: BLE001  (handed to the test)
            out["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the run did not end within {seconds} s"
    if "error" in out:
        raise out["error"]
    return out["result"]


def with_threads(config, threads: int):
    return dataclasses.replace(
        config, pipeline=dataclasses.replace(config.pipeline, actor_threads=threads)
    )


def cartpole_final_returns(name: str, overrides: list[str], seconds: float) -> np.ndarray:
    """The final returns of seeds 0-2 of `name` on gymnasium:CartPole-v1 at lag 1, trained
    one after another (a host env runs one seed per run: train.num_seeds is refused)."""
    from jaxrl_async.host import train_host

    returns = []
    for seed in range(3):
        config = load_config(
            name,
            ["env.name=gymnasium:CartPole-v1", "pipeline.lag=1", *overrides, f"train.seed={seed}"],
        )
        returns.append(bounded(lambda config=config: train_host(config), seconds)["final_return"])
    return np.asarray(returns)


def dqn_config(*overrides: str, rounds: int = 10):
    """DQN with 3-step prioritized replay: 4 envs x 4 steps a round over 2 actor threads,
    learning from round 1 on, two updates a round."""
    return load_config(
        "dqn_cartpole",
        [
            f"env.name={CORRIDOR}",
            "env.num_envs=4",
            "pipeline.rollout_len=4",
            "pipeline.actor_threads=2",
            "agent.hidden_sizes=[8]",
            "agent.n_step=3",
            "agent.updates_per_tick=2",
            "agent.epsilon_decay_steps=100",
            "replay.kind=prioritized",
            "replay.capacity=512",
            "replay.batch_size=8",
            "replay.learning_starts=32",
            "train.log_every=32",
            "train.progress=false",
            f"train.total_steps={16 * rounds}",
            *overrides,
        ],
    )


def random_trajectory(rng, T: int, B: int, extras: bool = True) -> Transition:
    """A corridor-shaped trajectory [T, B] with random rewards and episode ends."""
    obs = rng.normal(size=(T, B, 2)).astype(np.float32)
    return Transition(
        obs=obs,
        action=rng.integers(0, 2, (T, B)).astype(np.int32),
        reward=rng.normal(size=(T, B)).astype(np.float32),
        terminated=rng.random((T, B)) < 0.2,
        truncated=rng.random((T, B)) < 0.1,
        next_obs=obs + 1.0,
        extras={"epsilon": np.ones((T, B), np.float32)} if extras else {},
        version=np.zeros((T, B), np.int32),
    )


def record_executors(monkeypatch) -> list[dict]:
    """Each host run's Executor from now on, recorded: {"start": the Start it was given
    (None: a fresh run), "ready": the Start it started from, "last": the Progress after
    its last round}, as host arrays (a run updates its replay in place: donated
    buffers)."""
    from jaxrl_async.training import host_engine

    calls: list[dict] = []

    class Recording(host_engine.Executor):
        def __init__(self, config, agent, envs, start=None, **kwargs):
            super().__init__(config, agent, envs, start, **kwargs)
            calls.append(
                {
                    "start": jax.tree.map(np.asarray, start),
                    "ready": jax.tree.map(np.asarray, self.start),
                }
            )

        def step(self, progress):
            stepped = super().step(progress)
            if stepped is not None:
                calls[-1]["last"] = jax.tree.map(np.asarray, stepped[0])
            return stepped

    monkeypatch.setattr(host_engine, "Executor", Recording)
    return calls


class SeeingPolicy:
    """An actor policy (`host.policy.ActorPolicy`'s calls) that acts 1 in every env and
    keeps each observation it was given in `seen`."""

    def __init__(self) -> None:
        self.seen: list[np.ndarray] = []

    def prepare(self, params):
        return params

    def dispatch(self, prepared, memory, obs, step):
        self.seen.append(np.asarray(obs))
        return len(obs)

    def fetch(self, pending) -> ActOutput:
        return ActOutput(None, np.ones(pending, np.int64), {})
