"""2-D convolutions whose gradients stay on XLA's fast CPU path inside loops.

JAX's own gradient of a strided convolution is two convolutions with permuted dimension
numbers (the weights' gradient takes the batch as its features, the input's gradient a
transposed kernel). Inside a loop's body XLA's CPU compiler leaves those to its generic
loop emitter instead of its library convolutions, so a learner that scans minibatches
over a strided image torso (`agent.torso=nature`, a strided `cnn`: PPO's epochs, an
off-policy tick's updates, a chunk of ticks) ran its backward pass many times slower
(docs/performance.md, "Image torsos"). `conv_general_dilated` here computes the same
gradients with the transposes written out, so that every convolution XLA sees is in the
canonical NHWC / HWIO form: the same values, on the fast path wherever it sits.

It takes `lax.conv_general_dilated`'s arguments (flax's `nn.Conv(conv_general_dilated=)`
passes them) and handles the case the torsos use: 2-D, NHWC images, HWIO kernels, no
dilation, one feature group. Anything else goes to `lax.conv_general_dilated` unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

_DN = ("NHWC", "HWIO", "NHWC")
Pads = tuple[tuple[int, int], tuple[int, int]]


def conv_general_dilated(
    lhs: jax.Array,
    rhs: jax.Array,
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    **options: Any,
) -> jax.Array:
    """`lax.conv_general_dilated(lhs, rhs, window_strides, padding, **options)` with
    canonical gradient convolutions where `options` hold no more than `precision`, a
    dimension_numbers of NHWC / HWIO, dilations of 1 and one feature group."""
    plain = lhs.ndim == 4 and rhs.ndim == 4 and _plain(lhs.shape, rhs.shape, options)
    if plain:
        strides = (int(window_strides[0]), int(window_strides[1]))
        if isinstance(padding, str):
            padding = lax.padtype_to_pads(lhs.shape[1:3], rhs.shape[:2], strides, padding)
        pads: Pads = tuple((int(lo), int(hi)) for lo, hi in padding)  # type: ignore[assignment]
        # The input's gradient pads by k - 1 - lo: a padding past the kernel is left to lax.
        if all(0 <= p < k for pair, k in zip(pads, rhs.shape[:2]) for p in pair):
            return _conv(lhs, rhs, strides, pads, options.get("precision"))
    return lax.conv_general_dilated(lhs, rhs, window_strides, padding, **options)


def _plain(lhs_shape: tuple, rhs_shape: tuple, options: dict[str, Any]) -> bool:
    """Whether `options` ask for nothing but the torsos' plain convolution."""
    known = {"lhs_dilation", "rhs_dilation", "dimension_numbers", "feature_group_count"}
    dilations = (*(options.get("lhs_dilation") or ()), *(options.get("rhs_dilation") or ()))
    numbers = options.get("dimension_numbers") or _DN
    return (
        set(options) <= known | {"precision"}
        and options.get("feature_group_count", 1) == 1
        and all(d == 1 for d in dilations)
        and lax.conv_dimension_numbers(lhs_shape, rhs_shape, numbers)
        == lax.conv_dimension_numbers(lhs_shape, rhs_shape, _DN)
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _conv(x: jax.Array, w: jax.Array, strides: tuple[int, int], pads: Pads, precision: Any):
    return lax.conv_general_dilated(x, w, strides, pads, dimension_numbers=_DN, precision=precision)


def _conv_fwd(x, w, strides, pads, precision):
    return _conv(x, w, strides, pads, precision), (x, w)


def _conv_bwd(strides, pads, precision, residuals, dy):
    x, w = residuals
    kh, kw = w.shape[:2]
    # dW[i, j, c, o] = sum over b, y, x of X[b, s*y + i, s*x + j, c] dY[b, y, x, o]: a
    # convolution of the images with their channels as the batch and the batch as the
    # features, by dY as the kernel (dilated by the stride). A padding that the stride
    # does not tile leaves extra offsets at the end, past the kernel: cut off.
    dw = lax.conv_general_dilated(
        jnp.transpose(x, (3, 1, 2, 0)),
        jnp.transpose(dy, (1, 2, 0, 3)),
        (1, 1),
        pads,
        rhs_dilation=strides,
        dimension_numbers=_DN,
        precision=precision,
    )
    dw = jnp.transpose(dw[:, :kh, :kw, :], (1, 2, 0, 3))
    # dX: dY spread out by the stride, against the kernel flipped in space with its input
    # and output channels swapped, padded so that it comes out at the images' size.
    back = []
    for size, k, (lo, _), out, s in zip(x.shape[1:3], (kh, kw), pads, dy.shape[1:3], strides):
        before = k - 1 - lo
        back.append((before, size - ((out - 1) * s + 1) - before + k - 1))
    dx = lax.conv_general_dilated(
        dy,
        jnp.transpose(w[::-1, ::-1], (0, 1, 3, 2)),
        (1, 1),
        back,
        lhs_dilation=strides,
        dimension_numbers=_DN,
        precision=precision,
    )
    return dx.astype(x.dtype), dw.astype(w.dtype)


_conv.defvjp(_conv_fwd, _conv_bwd)
