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

An unpadded strided convolution whose kernel the stride divides (the Nature torso's first
two layers: 8x8 stride 4, 4x4 stride 2) takes no convolution op at all: `blocked_conv`
writes it as one matrix product of the images cut into stride-sized blocks, and a sum of
shifted slices. XLA's CPU convolutions run those layers (few channels, a large stride)
far below the machine's matrix-product rate, so on a CPU the product is faster
(docs/performance.md, "Image torsos"). An unpadded stride-1 convolution (the Nature
torso's third layer) is likewise one product, of each output pixel's patch: `patch_conv`.
Other backends keep their own convolutions, which were not measured against them.

It takes `lax.conv_general_dilated`'s arguments (flax's `nn.Conv(conv_general_dilated=)`
passes them) and handles the case the torsos use: 2-D, NHWC images, HWIO kernels, no
dilation, one feature group. Anything else goes to `lax.conv_general_dilated` unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
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
        unpadded = all(lo == hi == 0 for lo, hi in pads)
        product = _as_product(rhs.shape, strides) if unpadded else None
        if product is not None and jax.default_backend() == "cpu":
            return product(lhs, rhs, options.get("precision"))
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


def _as_product(kernel_shape: tuple, strides: tuple[int, int]) -> Callable | None:
    """An unpadded convolution as one matrix product, (x, w, precision) -> y: of its
    patches at stride 1 (`patch_conv`), of its stride-sized blocks where each stride
    divides its kernel side (`blocked_conv`); None where neither applies."""
    if strides == (1, 1):
        return patch_conv
    if all(k % s == 0 for k, s in zip(kernel_shape[:2], strides)):
        return lambda x, w, precision: blocked_conv(x, w, strides, precision)
    return None


def patch_conv(x: jax.Array, w: jax.Array, precision: Any = None) -> jax.Array:
    """An unpadded stride-1 convolution, NHWC by HWIO, as one matrix product: each output
    pixel's kh x kw patch of the images laid along the channels ([B, OH, OW, kh kw C], the
    kernel's shifted views side by side) times the kernel as [kh kw C, O]. The same sums
    as the convolution in another order, so the same values up to float rounding; by
    autodiff the weights' gradient is a product too, the images' a sum of shifted slices."""
    kh, kw, c, o = w.shape
    oh, ow = x.shape[1] - kh + 1, x.shape[2] - kw + 1
    views = [x[:, i : i + oh, j : j + ow] for i in range(kh) for j in range(kw)]
    patches = jnp.concatenate(views, axis=-1).reshape(-1, kh * kw * c)
    out = jnp.matmul(patches, w.reshape(kh * kw * c, o), precision=precision)
    return out.reshape(x.shape[0], oh, ow, o)


def blocked_conv(x: jax.Array, w: jax.Array, strides: tuple[int, int], precision: Any = None):
    """An unpadded convolution of strides (sh, sw) dividing the kernel (kh, kw), NHWC by
    HWIO, as a matrix product and a sum of shifted slices (no convolution op at all).

    The images are cut into sh x sw blocks, each block's pixels moved onto the channels
    ([B, H/sh, W/sw, sh sw C]); the kernel likewise into (kh/sh) x (kw/sw) blocks. Every
    block of the images times every block of the kernel is one product of matrices
    [B H W / (sh sw), sh sw C] x [sh sw C, (kh kw / (sh sw)) O]; output pixel (y, x) is
    then the sum over the kernel's blocks (a, b) of block (y + a, x + b)'s product with
    block (a, b). The same sums as the convolution, in another order, so the same values
    up to float rounding; the gradients, by autodiff, are matrix products too."""
    (sh, sw), (kh, kw, c, o) = strides, w.shape
    rh, rw = kh // sh, kw // sw  # the kernel in blocks
    oh, ow = (x.shape[1] - kh) // sh + 1, (x.shape[2] - kw) // sw + 1
    bh, bw = oh + rh - 1, ow + rw - 1  # the image blocks the output reads
    b = x.shape[0]
    blocks = x[:, : bh * sh, : bw * sw].reshape(b, bh, sh, bw, sw, c)
    blocks = blocks.transpose(0, 1, 3, 2, 4, 5).reshape(b * bh * bw, sh * sw * c)
    kernel = w.reshape(rh, sh, rw, sw, c, o).transpose(1, 3, 4, 0, 2, 5)
    products = jnp.matmul(blocks, kernel.reshape(sh * sw * c, rh * rw * o), precision=precision)
    products = products.reshape(b, bh, bw, rh, rw, o)
    out = products[:, :oh, :ow, 0, 0]
    for i in range(rh):
        for j in range(rw):
            if i or j:
                out = out + products[:, i : i + oh, j : j + ow, i, j]
    return out


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
