"""Every gymnax env traces inside the pipeline's shard_map as gymnax wrote it."""

import jax
import pytest

import jaxrl_async
from jaxrl_async.build import build_pipeline
from jaxrl_async.envs import registered_envs


@pytest.mark.parametrize("name", [n for n in registered_envs() if "MNIST" not in n])
def test_every_env_traces_inside_the_pipeline(name):
    config = jaxrl_async.load_config("ppo_cartpole", [
        f"env.name={name}", "env.num_envs=2", "pipeline.rollout_len=2",
        "train.total_steps=4", "agent.num_minibatches=1"])
    pipeline, _ = build_pipeline(config)
    state = jax.eval_shape(pipeline.init, jax.random.key(0))
    jax.eval_shape(pipeline.chunk(1), state)
