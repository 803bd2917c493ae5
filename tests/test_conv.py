"""`jaxrl_async.nn.conv`: the image torsos' convolution gives lax's values and gradients, and
inside a loop XLA compiles every convolution of its gradient in the canonical NHWC/HWIO
form (the form XLA's CPU compiler runs through its fast library convolutions)."""

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxrl_async.nn import conv
from jaxrl_async.nn.networks import Encoder
from jaxrl_async.nn.torsos import NatureTorso

DN = ("NHWC", "HWIO", "NHWC")
CANONICAL = "dim_labels=b01f_01io->b01f"

# (image H, W, channels, kernel (kh, kw), strides, padding, out channels)
CASES = [
    (36, 36, 4, (8, 8), (4, 4), "VALID", 8),  # Nature's layers (on its smallest image)
    (8, 8, 8, (4, 4), (2, 2), "VALID", 8),
    (10, 10, 3, (3, 3), (1, 1), "SAME", 4),  # IMPALA's and the cnn torso's
    (11, 11, 3, (3, 3), (2, 2), "SAME", 4),  # a stride that does not tile the image
    (13, 7, 2, (4, 4), (3, 3), "VALID", 3),  # nor here, and H != W
    (9, 12, 2, (3, 2), (2, 1), "SAME", 3),  # a rectangular kernel, unequal strides
    (8, 8, 2, (3, 3), (2, 2), ((1, 2), (0, 1)), 3),  # explicit, uneven padding
    (15, 14, 3, (4, 6), (2, 3), "VALID", 5),  # blocked: strides dividing the kernel unevenly
    (9, 9, 2, (3, 3), (2, 2), "VALID", 3),  # unpadded, but the stride does not divide
    (9, 9, 5, (3, 3), (1, 1), "VALID", 6),  # patches: Nature's third layer
    (7, 10, 2, (2, 3), (1, 1), "VALID", 3),  # patches of a rectangular kernel
]


def _loss(fn, strides, padding):
    def loss(x, w):
        y = fn(x, w, strides, padding, dimension_numbers=DN)
        return jnp.sum(jnp.sin(y))  # a gradient that differs from point to point

    return loss


@pytest.mark.parametrize("h,w,c,kernel,strides,padding,out", CASES)
def test_values_and_gradients_equal_lax(h, w, c, kernel, strides, padding, out):
    rng = np.random.default_rng(h * w + c)
    x = jnp.asarray(rng.normal(size=(3, h, w, c)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(*kernel, c, out)), jnp.float32)
    ours = conv.conv_general_dilated(x, k, strides, padding, dimension_numbers=DN)
    theirs = lax.conv_general_dilated(x, k, strides, padding, dimension_numbers=DN)
    product = padding == "VALID" and all(k % s == 0 for k, s in zip(kernel, strides))
    if product:  # the blocked or patch product sums in its own order
        np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-5 * float(jnp.max(theirs)))
    else:  # the same convolution op as lax's
        np.testing.assert_array_equal(ours, theirs)
    grads = jax.grad(_loss(conv.conv_general_dilated, strides, padding), (0, 1))(x, k)
    expected = jax.grad(_loss(lax.conv_general_dilated, strides, padding), (0, 1))(x, k)
    for got, want in zip(grads, expected, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * float(jnp.max(jnp.abs(want))))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rhs_dilation": (2, 2)},
        {"lhs_dilation": (2, 1), "padding": ((1, 1), (1, 1))},
        {"dimension_numbers": ("NCHW", "OIHW", "NCHW")},
        {"feature_group_count": 2},
    ],
)
def test_other_convolutions_are_lax_own(kwargs):
    """Dilations, other layouts and feature groups go to lax unchanged."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(2, 9, 9, 4)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(3, 3, 4, 4)), jnp.float32)
    kwargs = {"dimension_numbers": DN, "padding": "SAME", **kwargs}
    if kwargs["dimension_numbers"][0] == "NCHW":
        x, k = jnp.transpose(x, (0, 3, 1, 2)), jnp.transpose(k, (3, 2, 0, 1))
    if kwargs.get("feature_group_count") == 2:
        k = k[:, :, :2]
    ours = conv.conv_general_dilated(x, k, (1, 1), **kwargs)
    np.testing.assert_array_equal(ours, lax.conv_general_dilated(x, k, (1, 1), **kwargs))


@pytest.mark.parametrize(
    "shape,kernel,strides,blocked",
    [
        ((84, 84, 4), (8, 8), (4, 4), True),  # the Nature torso's first two layers
        ((20, 20, 32), (4, 4), (2, 2), True),
        ((15, 14, 3), (4, 6), (2, 3), True),
        ((9, 9, 2), (3, 3), (2, 2), False),  # the stride does not divide the kernel
        ((9, 9, 64), (3, 3), (1, 1), True),  # patches: the Nature torso's third layer
    ],
)
def test_unpadded_convolutions_are_matrix_products(shape, kernel, strides, blocked):
    """An unpadded convolution of stride 1, or strided with a stride that divides its
    kernel, compiles, forward and backward, to matrix products with no convolution op
    (XLA's CPU convolutions run those shapes far slower); the others keep their
    convolutions."""
    x = jnp.zeros((2, *shape), jnp.float32)
    k = jnp.zeros((*kernel, shape[-1], 4), jnp.float32)

    def loss(x, k):
        y = conv.conv_general_dilated(x, k, strides, "VALID", dimension_numbers=DN)
        return jnp.sum(jnp.sin(y))

    text = jax.jit(jax.grad(loss, (0, 1))).lower(x, k).compile().as_text()
    assert (" convolution(" not in text) == blocked


def _scanned_grad_hlo(torso: nn.Module, image: tuple[int, ...]) -> str:
    """The optimized HLO of SGD steps over a scan of minibatches through `torso`."""
    xs = jnp.zeros((2, 2, *image), jnp.uint8)
    params = torso.init(jax.random.key(0), xs[0])

    def steps(params, xs):
        def body(params, x):
            grads = jax.grad(lambda p: jnp.mean(torso.apply(p, x) ** 2))(params)
            return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads), None

        return lax.scan(body, params, xs)[0]

    return jax.jit(steps).lower(params, xs).compile().as_text()


@pytest.mark.parametrize(
    "torso,image",
    [(Encoder(conv=((8, 3, 2), (8, 3, 2))), (12, 12, 2))],
    ids=["cnn-strided"],
)
def test_strided_gradients_in_a_loop_compile_to_canonical_convolutions(torso, image):
    """Inside a scan's body every convolution of a strided torso's forward and backward
    passes is in XLA's canonical form: none with permuted dimension labels, which XLA's
    CPU compiler leaves to its slow generic emitter there. (The gradients of stride-1
    convolutions, IMPALA's, XLA lays out its own way, fast with or without this.)"""
    text = _scanned_grad_hlo(torso, image)
    convolutions = [line for line in text.splitlines() if " convolution(" in line]
    assert convolutions
    odd = [re.search(r"dim_labels=\S+", line) for line in convolutions if CANONICAL not in line]
    assert not odd, [m.group(0) if m else "?" for m in odd]


def test_the_torsos_train_as_with_lax_own_gradient(monkeypatch):
    """The Nature torso's parameter gradient is lax's, whichever convolution it runs."""
    x = jnp.asarray(np.random.default_rng(1).integers(0, 256, (3, 36, 36, 4)), jnp.uint8)
    torso = NatureTorso()
    params = torso.init(jax.random.key(0), x)

    def grads():
        return jax.grad(lambda p: jnp.sum(jnp.sin(torso.apply(p, x))))(params)

    ours = grads()
    monkeypatch.setattr(conv, "conv_general_dilated", lax.conv_general_dilated)
    theirs = grads()
    for got, want in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * float(jnp.max(jnp.abs(want))))


def test_the_nature_torso_trains_in_a_loop_without_a_convolution_op():
    """Its three layers are blocked and patch products: forward and backward, inside a
    scan's body, XLA compiles no convolution at all."""
    assert " convolution(" not in _scanned_grad_hlo(NatureTorso(), (84, 84, 4))
