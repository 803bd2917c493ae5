#!/usr/bin/env python
"""Image-torso gradients inside a loop on the CPU: `jaxrl_async.nn.conv`'s canonical
gradient convolutions against JAX's own, interleaved.

    python scripts/bench_conv_grad.py                        # Nature torso, 84x84x4 frames
    python scripts/bench_conv_grad.py --torso impala --repeats 5 --json out.json

One program is SGD over `--minibatches` minibatches of `--batch` uint8 frames scanned in
a `lax.scan`, as PPO's epochs and an off-policy tick's updates run: the gradient of the
torso's mean squared features, then a plain step. Each round times one call of the
program built with each convolution (compiled beforehand), in turn. Seconds per call,
medians with min and max over the rounds.
"""

from __future__ import annotations

import sys
import time

import harness  # beside this script in scripts/
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrl_async.nn import conv
from jaxrl_async.nn.torsos import IMAGE_TORSOS

OURS = conv.conv_general_dilated
LABELS = {
    "jax": "JAX's own gradient (lax.conv_general_dilated)",
    "canonical": "canonical gradient convolutions (jaxrl_async.nn.conv)",
}


def program(torso_name: str, frames: jax.Array, use_ours: bool):
    """One timed call of the jitted SGD scan built with either convolution."""
    conv.conv_general_dilated = OURS if use_ours else lax.conv_general_dilated
    torso = IMAGE_TORSOS[torso_name]()
    params = torso.init(jax.random.key(0), frames[0, :1])

    def steps(params, xs):
        def body(params, x):
            grads = jax.grad(lambda p: jnp.mean(torso.apply(p, x) ** 2))(params)
            return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads), None

        return lax.scan(body, params, xs)[0]

    compiled = jax.jit(steps).lower(params, frames).compile()
    conv.conv_general_dilated = OURS

    def call(_round: int) -> dict:
        start = time.perf_counter()
        jax.block_until_ready(compiled(params, frames))
        return {"seconds": time.perf_counter() - start}

    return call


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("--torso", default="nature", choices=sorted(IMAGE_TORSOS))
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--minibatches", type=int, default=4)
    p.add_argument("--size", type=int, default=84, help="frames are size x size x 4")
    args = p.parse_args(argv)
    shape = (args.minibatches, args.batch, args.size, args.size, 4)
    frames = jnp.asarray(np.random.default_rng(0).integers(0, 256, shape), jnp.uint8)
    programs = {name: program(args.torso, frames, name == "canonical") for name in LABELS}
    runs = harness.interleave(programs, args.repeats)
    what = f"s per call ({args.minibatches} minibatches of {args.batch} frames, "
    what += f"{args.size}x{args.size}x4)"
    rows = [
        [
            LABELS[name],
            harness.cell(harness.of(runs[name], "seconds"), ".3g"),
            "1"
            if name == "canonical"
            else harness.cell(harness.ratios(runs[name], runs["canonical"], "seconds"), ".3g"),
        ]
        for name in programs
    ]
    return harness.report(
        __file__, argv, ["convolution", what, "ratio to canonical"], rows, args.json, runs=runs
    )


if __name__ == "__main__":
    sys.exit(main())
