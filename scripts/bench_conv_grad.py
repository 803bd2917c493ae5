#!/usr/bin/env python
"""Image-torso gradients inside a loop on the CPU: `jaxrl_async.nn.conv`'s canonical
gradient convolutions against JAX's own, interleaved.

    python scripts/bench_conv_grad.py                        # Nature torso, 84x84x4 frames
    python scripts/bench_conv_grad.py --torso impala --repeats 5 --json out.json

One program is SGD over `--minibatches` minibatches of `--batch` uint8 frames scanned in
a `lax.scan`, as PPO's epochs and an off-policy tick's updates run: the gradient of the
torso's mean squared features, then a plain step. Each repeat times one call of the
program built with each convolution (compiled beforehand), in turn. Seconds per call,
medians with min and max over the repeats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrl_async.nn import conv
from jaxrl_async.nn.torsos import IMAGE_TORSOS

OURS = conv.conv_general_dilated


def program(torso_name: str, frames: jax.Array, use_ours: bool):
    """The jitted SGD scan with either convolution, and its parameters."""
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
    return compiled, params


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--torso", default="nature", choices=sorted(IMAGE_TORSOS))
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--minibatches", type=int, default=4)
    p.add_argument("--size", type=int, default=84, help="frames are size x size x 4")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json")
    args = p.parse_args(argv)
    shape = (args.minibatches, args.batch, args.size, args.size, 4)
    frames = jnp.asarray(np.random.default_rng(0).integers(0, 256, shape), jnp.uint8)
    programs = {
        name: program(args.torso, frames, name == "canonical") for name in ("jax", "canonical")
    }
    seconds: dict[str, list[float]] = {name: [] for name in programs}
    for repeat in range(args.repeats):
        for name, (compiled, params) in programs.items():
            start = time.perf_counter()
            jax.block_until_ready(compiled(params, frames))
            seconds[name].append(time.perf_counter() - start)
        print(f"repeat {repeat}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in seconds.items()))
    summary = {name: spread(values) for name, values in seconds.items()}
    ratios = [j / c for j, c in zip(seconds["jax"], seconds["canonical"], strict=True)]
    summary["jax_over_canonical"] = spread(ratios)
    print(json.dumps(summary, indent=2))
    if args.json:
        command = " ".join(["python scripts/bench_conv_grad.py", *(argv or sys.argv[1:])])
        with open(args.json, "w") as f:
            json.dump(
                {"command": command, "args": vars(args), "seconds": seconds, "summary": summary},
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
