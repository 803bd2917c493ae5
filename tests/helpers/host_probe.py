"""A probe agent for the host executor's tests: its parameters are a counter of the
updates applied, so every trajectory shows which parameters acted it.

`act` takes action 0 and records the acting counter in `extras["acted"]`; `learn` adds 1
and reports what it consumed: the trajectory's version tags and the counters recorded."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_async.types import ActOutput, Agent, LearnOutput


class ProbeState(NamedTuple):
    params: jax.Array  # int32 []: the updates applied


def make_probe_agent() -> Agent:
    def init(key):
        del key
        return ProbeState(jnp.zeros((), jnp.int32))

    def act(params, carry, obs, episode_start, keys, clock):
        batch = keys.shape[0]
        return ActOutput(
            carry, jnp.zeros((batch,), jnp.int32), {"acted": jnp.full((batch,), params)}
        )

    def learn(state, traj, key):
        del key
        metrics = {
            "version_min": traj.version.min().astype(jnp.float32),
            "version_max": traj.version.max().astype(jnp.float32),
            "acted_min": traj.extras["acted"].min().astype(jnp.float32),
            "acted_max": traj.extras["acted"].max().astype(jnp.float32),
            "learner_version": state.params.astype(jnp.float32),
        }
        return LearnOutput(ProbeState(state.params + 1), metrics)

    return Agent(init, act, learn)
