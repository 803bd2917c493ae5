"""From a config to the programs of a run: env, agent, pipeline (shared by train and eval)."""

from __future__ import annotations

from jaxrl_async import envs as envs_lib
from jaxrl_async.agents import make_agent
from jaxrl_async.config.loader import Config
from jaxrl_async.errors import ConfigError
from jaxrl_async.nn.torsos import check_image_observation
from jaxrl_async.pipeline.layout import choose_layout
from jaxrl_async.pipeline.program import PipelineShape, make_pipeline
from jaxrl_async.pipeline.sharding import AXIS, make_mesh
from jaxrl_async.types import BuildContext


def build_pipeline(
    config: Config, env=None, env_params=None, num_updates: int | None = None, mesh=None
):
    """(Pipeline, Agent) for `config`, on `env` if given (else `config.env.name`).

    Checks the env against its declared spaces first (EnvSpecError on a mismatch).
    `num_updates` sets the length of schedules (learning rate, importance-weight
    exponent; default: the config's); `mesh` the devices (default: as many as the run's
    layout on this machine takes, `layout.choose_layout`).
    """
    env, env_params = envs_lib.resolve(config.env, env, env_params)
    spec = envs_lib.check_env(env, env_params)
    if config.env.normalize_obs and isinstance(spec.obs_shape, dict):
        raise ConfigError(
            f"env.normalize_obs=true needs an array observation; "
            f"{config.env.name} observes a dict ({', '.join(spec.obs_shape)})"
        )
    check_image_observation(config.agent.torso, spec.obs_shape, config.env.name)
    mesh = make_mesh(choose_layout(config).devices) if mesh is None else mesh
    num_updates = config.num_updates if num_updates is None else num_updates
    # On one device there is nothing to average over: no axis, so no all-reduce (and no
    # packing of gradients for one) in every gradient step.
    axis_name = AXIS if mesh.size > 1 else None
    agent = make_agent(
        config.agent,
        BuildContext(
            spec, config.env.num_envs, config.pipeline.rollout_len, num_updates, axis_name=axis_name
        ),
    )
    batched_env = envs_lib.make_batched(env, config.env.normalize_obs, axis_name=axis_name)
    pipeline = make_pipeline(
        agent,
        batched_env,
        env_params,
        PipelineShape(
            config.pipeline.rollout_len,
            config.env.num_envs,
            unroll=config.pipeline.unroll,
            lag=config.pipeline.lag,
            max_staleness=config.pipeline.max_staleness,
            total_steps=num_updates * config.batch_size,
        ),
        mesh=mesh,
        replay=config.replay,
    )
    return pipeline, agent
