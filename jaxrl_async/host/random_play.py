"""Random play on a host env: the baselines a run is read against.

`random_returns`: uniformly random actions on the env an `EnvConfig` names, with its
kwargs (so Atari's options, and raw game scores as the training reports them). Each env
contributes its first episodes only, the same number from each, so short episodes are
not favoured over the long ones still running when enough have ended.

`random_loop_sps`: how fast the env itself steps, its own vector loop with random
actions and nothing else: the ceiling any trainer of that env reaches at that number of
envs, which a host run's SPS is read against (`bench --profile`, scripts/bench_host.py).
"""

from __future__ import annotations

import time

import numpy as np

from jaxrl_async.host.by_name import make_host_env


def random_returns(env_config, episodes: int, seed: int = 0) -> np.ndarray:
    """The raw returns of `episodes` episodes (rounded up to a multiple of the envs) of
    uniformly random actions on `env_config`'s host env: each env's first ones, in env
    order."""
    num_envs = env_config.num_envs
    per_env = -(-episodes // num_envs)
    env = make_host_env(env_config.name, num_envs, **env_config.kwargs)
    ended: list[list[float]] = [[] for _ in range(num_envs)]
    try:
        env.reset(seed)
        space = env.env.action_space  # the vector env's own batched action space
        space.seed(seed)
        while min(len(e) for e in ended) < per_env:
            step = env.step(np.asarray(space.sample(), env.spec.action_dtype))
            for i in np.flatnonzero(step.episode_done):
                ended[i].append(float(step.episode_return[i]))
    finally:
        env.close()
    return np.asarray([r for e in ended for r in e[:per_env]])


def random_loop_sps(env_config, seconds: float, seed: int = 0) -> float:
    """Env steps per second of `env_config`'s vector env stepped with random actions for
    about `seconds`: no policy and no adapter (the vector env the adapter wraps, stepped
    directly: Gymnasium's, or an EnvPool with its same-step resets)."""
    env = make_host_env(env_config.name, env_config.num_envs, **env_config.kwargs)
    vec = env.env
    try:
        vec.reset(seed=seed)
        vec.action_space.seed(seed)
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            vec.step(vec.action_space.sample())
            steps += env.num_envs
        return steps / (time.perf_counter() - start)
    finally:
        env.close()
