"""Env fixes: every gymnax env traces inside the pipeline; Asterix's slot sampler is exact."""

import jax
import numpy as np
import pytest

import jaxrl_async
from jaxrl_async.build import build_pipeline
from jaxrl_async.envs import registered_envs
from jaxrl_async.envs.fixes import asterix_free_slot


def free_slot_reference(order, taken):
    """gymnax's while_sample_slots loop in plain Python, given its permutation."""
    position, free = 0, 0
    while position < 7 and free == 0:
        position += 1
        free = int(taken[order[position]] == 0)
    return order[position], free


def test_asterix_free_slot_matches_the_gymnax_loop():
    rng = np.random.default_rng(0)
    taken = (rng.random((500, 8)) < rng.random((500, 1))).astype(np.int32)
    taken[:20] = 1  # no free slot at all
    taken[20:40] = 0  # every slot free
    keys = jax.random.split(jax.random.key(3), len(taken))
    slots, frees = jax.device_get(jax.jit(jax.vmap(asterix_free_slot))(keys, taken))
    for key, row, slot, free in zip(keys, taken, slots, frees):
        order = np.asarray(jax.random.permutation(key, np.arange(8)))
        assert (slot, free) == free_slot_reference(order, row)
    assert slots.dtype == frees.dtype == np.int32


@pytest.mark.parametrize("name", [n for n in registered_envs() if "MNIST" not in n])
def test_every_env_traces_inside_the_pipeline(name):
    config = jaxrl_async.load_config("ppo_cartpole", [
        f"env.name={name}", "env.num_envs=2", "pipeline.rollout_len=2",
        "train.total_steps=4", "agent.num_minibatches=1"])
    pipeline, _ = build_pipeline(config)
    state = jax.eval_shape(pipeline.init, jax.random.key(0))
    jax.eval_shape(pipeline.chunk(1), state)
