"""Reproducibility: what is bitwise equal, and train.deterministic."""

import jax
import numpy as np
import pytest

import jaxrl_async
from jaxrl_async.pipeline.program import DETERMINISTIC_OPTIONS
from tests.helpers.configs import PPO_SMALL

SMALL = PPO_SMALL


def _bits(tree):
    leaves = []
    for x in jax.tree.leaves(tree):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        leaves.append(np.asarray(x))
    return leaves


@pytest.mark.slow
def test_deterministic_mode_on_cpu_changes_no_bit():
    """On CPU XLA is deterministic already: the mode must not change the numbers, and a
    deterministic run repeats itself bit for bit (the whole state: params, optimizer,
    env states, keys)."""
    plain = jaxrl_async.train(jaxrl_async.load_config("ppo_cartpole", SMALL))
    config = jaxrl_async.load_config("ppo_cartpole", SMALL + ["train.deterministic=true"])
    a, b = jaxrl_async.train(config), jaxrl_async.train(config)
    for x, y, z in zip(_bits(a.state), _bits(b.state), _bits(plain.state)):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)
    np.testing.assert_array_equal(a.metrics["loss"], plain.metrics["loss"])


def test_deterministic_options_reach_the_compiler():
    """The options are XLA debug options every backend accepts; a program compiled with them
    runs (on a GPU they select deterministic scatters and reductions)."""
    assert DETERMINISTIC_OPTIONS == {
        "xla_gpu_deterministic_ops": True,
        "xla_gpu_exclude_nondeterministic_ops": True,
    }
    compiled = (
        jax.jit(lambda x: x.at[jax.numpy.array([0, 0])].add(1.0))
        .lower(jax.numpy.zeros(2))
        .compile(compiler_options=DETERMINISTIC_OPTIONS)
    )
    np.testing.assert_array_equal(compiled(jax.numpy.zeros(2)), [2.0, 0.0])
