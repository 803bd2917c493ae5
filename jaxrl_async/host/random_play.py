"""Random play on a host env: the baseline a learning curve is read against.

Uniformly random actions on the env an `EnvConfig` names, with its kwargs (so Atari's
options, and raw game scores as the training reports them). Each env contributes its
first episodes only, the same number from each, so short episodes are not favoured over
the long ones still running when enough have ended.
"""

from __future__ import annotations

import numpy as np

from jaxrl_async.envs.spec import EnvSpec
from jaxrl_async.host.by_name import make_host_env


def random_actions(rng: np.random.Generator, spec: EnvSpec, num_envs: int) -> np.ndarray:
    """Uniform actions [num_envs, ...]: any of a discrete action's values, or a point of
    a vector action's bounds."""
    if spec.discrete:
        return rng.integers(spec.num_actions, size=num_envs).astype(spec.action_dtype)
    low = np.broadcast_to(np.asarray(spec.action_low, np.float64), spec.action_shape)
    high = np.broadcast_to(np.asarray(spec.action_high, np.float64), spec.action_shape)
    return rng.uniform(low, high, (num_envs, *spec.action_shape)).astype(spec.action_dtype)


def random_returns(env_config, episodes: int, seed: int = 0) -> np.ndarray:
    """The raw returns of `episodes` episodes (rounded up to a multiple of the envs) of
    uniformly random actions on `env_config`'s host env: each env's first ones, in env
    order."""
    num_envs = env_config.num_envs
    per_env = -(-episodes // num_envs)
    env = make_host_env(env_config.name, num_envs, **env_config.kwargs)
    rng = np.random.default_rng(seed)
    ended: list[list[float]] = [[] for _ in range(num_envs)]
    try:
        env.reset(seed)
        while min(len(e) for e in ended) < per_env:
            step = env.step(random_actions(rng, env.spec, num_envs))
            for i in np.flatnonzero(step.episode_done):
                ended[i].append(float(step.episode_return[i]))
    finally:
        env.close()
    return np.asarray([r for e in ended for r in e[:per_env]])
