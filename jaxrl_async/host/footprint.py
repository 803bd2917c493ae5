"""What a host-env run holds on its learner's device, counted before anything is allocated.

The learner state and, off-policy, the replay (`jax.eval_shape` of the agent's init and
of the replay's, as `pipeline/footprint.py` counts a JAX env's run). The envs' states live in
Gymnasium's numpy envs on the host and each round's trajectories pass through host
memory to the learner: not counted here.
"""

from __future__ import annotations

import jax

from jaxrl_async.config.loader import Config
from jaxrl_async.pipeline import footprint as memory


def host_footprint(config: Config, agent, spec) -> memory.Footprint:
    """The learner device's bytes: the learner state and, off-policy, the replay, each
    train.num_seeds times (seed-batched runs each hold their own, `seeds.py`)."""
    key = jax.eval_shape(lambda: jax.random.key(config.train.seed, impl=config.prng_impl))
    learner = jax.eval_shape(agent.init, key)
    parts = memory.learner_parts(learner)
    total = sum(memory.global_bytes(x) for x in jax.tree.leaves(learner))
    if agent.data == "replay":
        from jaxrl_async.host.replay_learner import ReplayLearner

        replay = jax.eval_shape(lambda: ReplayLearner(agent, config, spec).init().replay)
        parts["replay"] = sum(memory.device_bytes(x) for x in jax.tree.leaves(replay))
        total += parts["replay"]
    runs = config.train.num_seeds
    return memory.Footprint({k: runs * v for k, v in parts.items()}, 0, runs * total)
