"""Every gymnax env, and one env of every suite on its default settings, traces inside
the pipeline's shard_map (tracing only: a type error there is a trace-time error)."""

import jax
import pytest

import jaxrl_async
from jaxrl_async.envs import registered_envs
from jaxrl_async.pipeline.build import build_pipeline

# brax's default backend (generalized) carries constants through its contact solver and
# mass-matrix loops that shard_map's varying-type check rejected; navix, craftax, every
# xminigrid id and most jumanji ids likewise. The pipeline now runs unchecked.
SUITE_ENVS = [
    "brax:inverted_pendulum",
    "jumanji:Snake-v1",
    "craftax:Craftax-Classic-Symbolic-v1",
    "navix:Navix-Empty-5x5-v0",
    "xminigrid:MiniGrid-Empty-5x5",
]


@pytest.mark.parametrize("name", [n for n in registered_envs() if "MNIST" not in n] + SUITE_ENVS)
def test_every_env_traces_inside_the_pipeline(name):
    config = jaxrl_async.load_config(
        "ppo_cartpole",
        [
            f"env.name={name}",
            "env.num_envs=2",
            "pipeline.rollout_len=2",
            "train.total_steps=4",
            "agent.num_minibatches=1",
        ],
    )
    pipeline, _ = build_pipeline(config)
    state = jax.eval_shape(pipeline.init, jax.random.key(0))
    jax.eval_shape(pipeline.chunk(1), state)
