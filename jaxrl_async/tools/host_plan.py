"""The plan of a host-env run (env.name=gymnasium:<id>, envpool:<task>), as `tools/plan.py`
prints it.

A host run keeps on its learner's device only the learner state and, off-policy, the
replay; those are counted (`host/footprint.py`). The envs' states and each round's
trajectories live in host memory: not counted, and the plan says so. One env is built to
read the spaces, and closed.
"""

from __future__ import annotations

import jax

from jaxrl_async.config.loader import Config
from jaxrl_async.host.footprint import host_footprint
from jaxrl_async.pipeline.layout import learner_rows
from jaxrl_async.tools.plan_common import common_plan, memory_fits

# The update is the agent's own `learn`, which every JAX-env config of the agent exports
# inside its chunk; here its input would be the executor's numpy trajectories.
NOT_EXPORTED = (
    "the learner's update is not exported here: it is the agent's learn, exported in the "
    "chunk of a JAX-env config of the same agent"
)
NOT_COUNTED = (
    "not counted: the envs' states (Gymnasium's or EnvPool's, in host memory) and each "
    "round's trajectories, which pass through host memory to the learner"
)


def _spec(config: Config):
    """The env's spaces as an EnvSpec, from one env built and closed."""
    from jaxrl_async.host.by_name import make_host_env

    env = make_host_env(config.env.name, 1, **config.env.kwargs)
    try:
        return env.spec
    finally:
        env.close()


def host_plan(config: Config, platform: str | None) -> dict:
    """`tools.plan.make_plan` for a host-env config: the same keys, what is not counted
    listed, and with `platform` the learner's init exported (its update takes the
    executor's trajectories, so it is not)."""
    from jaxrl_async.host.executor import make_host_agent
    from jaxrl_async.training.plan import plan_host

    plan = plan_host(config, None, False)
    spec = _spec(config)
    agent = make_host_agent(config, spec)
    footprint = host_footprint(config, agent, spec)
    programs = ["learner init", "learn", "actor policy"]
    programs += ["evaluation"] if config.eval.every > 0 else []
    result = common_plan(config, plan, footprint, programs)
    threads = config.pipeline.actor_threads
    result["batches"] = {
        "seeds": 1,
        "envs": config.env.num_envs,
        "actor_threads": threads,
        "actor_processes": config.pipeline.actor_processes,
        "trajectory": [config.pipeline.rollout_len, config.env.num_envs],
        "rows_per_gradient_step": learner_rows(config),
    }
    if config.agent.off_policy:
        result["batches"]["replay_capacity"] = config.replay.capacity
        result["batches"]["replay_batch"] = config.replay.batch_size
    result["not_counted"] = [NOT_COUNTED]
    result["memory"] = memory_fits(footprint, None if platform else jax.devices()[:1])
    if platform is not None:
        from jaxrl_async.tools.gpu_export import export_program

        key = jax.eval_shape(lambda: jax.random.key(config.train.seed, impl=config.prng_impl))
        result["export"] = {
            "platform": platform,
            "programs": {"learner init": export_program(agent.init, (key,), platform, "init")},
            "notes": [NOT_EXPORTED],
        }
    return result
