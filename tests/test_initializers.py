"""initializers.orthogonal: jax's orthogonal values, with no batched QR under vmap."""

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.nn.initializers import orthogonal

SHAPE = (6, 4)


def keys(n):
    return jax.random.split(jax.random.key(3), n)


def qr_operand_ranks(fn, *args) -> list[int]:
    """The rank of every QR factorisation's operand in fn's jaxpr (nested ones included)."""
    ranks = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if "qr" in eqn.primitive.name or "geqrf" in eqn.primitive.name:
                ranks.append(eqn.invars[0].aval.ndim)
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return ranks


@pytest.mark.parametrize("scale", [1.0, np.sqrt(2)])
def test_the_same_values_as_jax_orthogonal_alone_and_under_vmap(scale):
    mine, theirs = orthogonal(scale), jax.nn.initializers.orthogonal(scale)
    k = keys(1)[0]
    np.testing.assert_array_equal(mine(k, SHAPE), theirs(k, SHAPE))
    batched = jax.jit(jax.vmap(lambda k: mine(k, SHAPE)))(keys(3))
    reference = jax.vmap(lambda k: theirs(k, SHAPE))(keys(3))
    np.testing.assert_array_equal(batched, reference)
    grid = keys(6).reshape(2, 3)
    nested = jax.vmap(jax.vmap(lambda k: mine(k, SHAPE)))(grid)
    assert nested.shape == (2, 3, *SHAPE)
    np.testing.assert_array_equal(nested, jax.vmap(jax.vmap(lambda k: theirs(k, SHAPE)))(grid))
    q = np.asarray(batched[0]) / scale
    np.testing.assert_allclose(q.T @ q, np.eye(SHAPE[1]), atol=1e-5)


def test_no_qr_runs_batched_under_vmap():
    theirs = jax.vmap(lambda k: jax.nn.initializers.orthogonal()(k, SHAPE))
    mine = jax.vmap(jax.vmap(lambda k: orthogonal()(k, SHAPE)))
    assert max(qr_operand_ranks(theirs, keys(3))) == 3  # what hung on two devices
    ranks = qr_operand_ranks(mine, keys(6).reshape(2, 3))
    assert ranks and max(ranks) == 2, ranks
    assert jnp.asarray(mine(keys(6).reshape(2, 3))).shape == (2, 3, *SHAPE)
