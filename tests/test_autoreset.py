"""`reset_where` (the suite adapters' auto-reset) equals `jnp.where(done, reset(key), state)`
bit for bit: per env, vmapped (the ended envs gathered, a chunk at a time) and under two
nested vmaps (a seed batch around the env batch)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.envs.suites.autoreset import reset_where


def reset(key, scale):
    """A reset with randomness, a typed key in its state and an extra argument."""
    key, sub = jax.random.split(key)
    return {
        "x": scale * jax.random.uniform(sub, (3,)),
        "n": jax.random.randint(sub, (), 0, 9),
        "key": key,
    }


def reference(done, key, state, scale):
    return jax.tree.map(lambda new, old: jnp.where(done, new, old), reset(key, scale), state)


def batch(n, seed):
    keys = jax.random.split(jax.random.key(seed), n)
    return keys, jax.vmap(reset, (0, None))(jax.random.split(jax.random.key(seed + 1), n), 1.0)


def assert_trees_equal(a, b):
    a, b = (
        jax.tree.map(
            lambda x: jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x,
            t,
        )
        for t in (a, b)
    )
    jax.tree.map(np.testing.assert_array_equal, a, b)


@pytest.mark.parametrize("ended", [0, 1, 3, 7, 40])
def test_vmapped_equals_where_for_any_number_of_ended_envs(ended):
    """40 envs: chunks of 3, so 7 ended take three passes and 40 fourteen."""
    keys, state = batch(40, 0)
    done = jnp.zeros(40, bool).at[jax.random.permutation(jax.random.key(2), 40)[:ended]].set(True)
    scale = jnp.float32(2.0)  # unbatched: broadcast over the batch
    ours = jax.jit(jax.vmap(lambda d, k, s: reset_where(reset, d, k, s, scale)))(done, keys, state)
    expected = jax.vmap(reference, (0, 0, 0, None))(done, keys, state, scale)
    assert_trees_equal(ours, expected)


def test_one_env_and_nested_vmaps_equal_where():
    keys, state = batch(24, 3)
    done = jax.random.bernoulli(jax.random.key(4), 0.3, (24,))
    scale = jnp.linspace(1.0, 2.0, 24)  # batched this time
    expected = jax.vmap(reference)(done, keys, state, scale)
    one = jax.jit(lambda d, k, s, c: reset_where(reset, d, k, s, c))
    for i in (int(np.argmax(done)), int(np.argmin(done))):  # one ended, one not
        assert_trees_equal(
            one(done[i], keys[i], jax.tree.map(lambda x: x[i], state), scale[i]),
            jax.tree.map(lambda x: x[i], expected),
        )
    nested = jax.jit(jax.vmap(jax.vmap(one)))
    split = lambda x: x.reshape(4, 6, *x.shape[1:])  # noqa: E731  (4 seeds of 6 envs)
    ours = nested(split(done), split(keys), jax.tree.map(split, state), split(scale))
    assert_trees_equal(ours, jax.tree.map(split, expected))
