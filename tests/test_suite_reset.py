"""`reset_where`, the auto-reset of suites whose reset is costly: the same values as
`where(done, reset(...), stepped)` per env, however many envs ended, under one vmap or
two, and unbatched."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.envs.suites._reset import chunk, reset_where


def fresh(key, scale):
    """A toy reset from a typed key: random values, an int and a key."""
    a, b = jax.random.split(key)
    return {"x": scale * jax.random.normal(a, (3,)), "t": jnp.int32(0), "key": b}


def stepped_states(n):
    return {"x": jnp.arange(3 * n, dtype=jnp.float32).reshape(n, 3),
            "t": jnp.arange(n, dtype=jnp.int32) + 5,
            "key": jax.random.split(jax.random.key(9), n)}


def reference(done, keys, scale, stepped):
    """The plain select, with every env's reset computed."""
    new = jax.vmap(fresh, in_axes=(0, None))(keys, scale)

    def pick(f, s):
        return jnp.where(done.reshape(done.shape + (1,) * (f.ndim - 1)), f, s)

    out = {k: pick(new[k], stepped[k]) for k in ("x", "t")}
    out["key"] = jax.random.wrap_key_data(pick(jax.random.key_data(new["key"]),
                                               jax.random.key_data(stepped["key"])))
    return out


def assert_same(got, want):
    for k in want:
        g, w = got[k], want[k]
        if k == "key":
            g, w = jax.random.key_data(g), jax.random.key_data(w)
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=k)


@pytest.mark.parametrize("n, ended", [
    (16, []), (16, [3]), (16, [0, 7, 15]), (16, list(range(16))),
    (130, []), (130, [129]), (130, [1, 2, 64, 128, 129]), (130, list(range(0, 130, 2)))])
def test_batched_matches_the_plain_select(n, ended):
    assert (chunk(16), chunk(130)) == (1, 2)  # 130: whole chunks and a half-filled one
    done = jnp.zeros(n, bool).at[jnp.asarray(ended, jnp.int32)].set(True)
    keys = jax.random.split(jax.random.key(1), n)
    stepped = stepped_states(n)
    step = jax.jit(jax.vmap(lambda d, k, s: reset_where(fresh, d, (k, 2.0), s)))
    assert_same(step(done, keys, stepped), reference(done, keys, 2.0, stepped))


def test_unbatched_and_unbatched_inputs():
    keys = jax.random.split(jax.random.key(2), 2)
    state = jax.tree.map(lambda x: x[0], stepped_states(1))
    one = jax.jit(lambda d, k, s: reset_where(fresh, d, (k, 2.0), s))
    for done in (False, True):
        want = jax.tree.map(lambda x: x[0], reference(
            jnp.asarray([done]), keys[:1], 2.0, jax.tree.map(lambda x: x[None], state)))
        assert_same(one(jnp.bool_(done), keys[0], state), want)
    # One stepped state for every env (unbatched), a scale per env.
    got = jax.jit(jax.vmap(lambda d, k, c: reset_where(fresh, d, (k, c), state)))(
        jnp.asarray([True, False]), keys, jnp.asarray([1.0, 3.0]))
    np.testing.assert_array_equal(got["t"], [0, int(state["t"])])
    np.testing.assert_array_equal(got["x"][0], fresh(keys[0], 1.0)["x"])


def test_a_second_vmap_folds_into_the_batch():
    seeds, n = 3, 16
    done = jnp.asarray(np.random.default_rng(0).random((seeds, n)) < 0.2)
    keys = jax.random.split(jax.random.key(3), seeds * n).reshape(seeds, n)
    stepped = jax.tree.map(lambda x: jnp.stack([x] * seeds), stepped_states(n))
    inner = jax.vmap(lambda d, k, s: reset_where(fresh, d, (k, 2.0), s))
    got = jax.jit(jax.vmap(inner))(done, keys, stepped)
    assert_same(got, jax.vmap(lambda d, k, s: reference(d, k, 2.0, s))(done, keys, stepped))
