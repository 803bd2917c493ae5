"""Host-executor runs as the tests drive them: in a thread that must end in bounded time,
with another actor-thread count, and the learning tests' seeds on Gymnasium's CartPole."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np

from jaxrl_async.config.loader import load_config

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
