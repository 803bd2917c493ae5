#!/usr/bin/env python
"""The image learner against the CPU's limit: ppo_atari_breakout's update in FLOP/s, next
to this machine's dense matmul and convolution FLOP/s, all timed here, interleaved.

    python scripts/bench_flops.py                      # 3 rounds, the config as users run it
    python scripts/bench_flops.py --repeats 5 --json flops.json
    python scripts/bench_flops.py --set agent.num_minibatches=8   # a config override
    python scripts/bench_flops.py --before    # and the learner with convolution ops only

Each round times, in turn: one jitted f32 matmul of two --matmul x --matmul matrices
(2 n^3 FLOPs); one large stride-1 convolution (3x3, 128 -> 128 channels, NHWC, 2 k^2
C_in C_out FLOPs an output pixel); the Nature torso's first convolution (8x8 stride 4,
4 -> 32 channels) forward on 256 frames, the torso's own shape; the PPO learner's value
pass alone (`agent.targets`); and one whole update (`agent.learn`, jitted as the host
executor jits it, `make_learner`), on a trajectory of random uint8 frames of the run's
shape (FLOPs do not depend on the values).

An update's FLOPs, which rate every program, are an analytic count of the Nature torso
and heads: forward on every frame the value pass reads (x_t, and x' of the last step);
forward and backward, where the backward is the weights' and the inputs' gradients save
the first layer's input gradient, on every minibatch frame. XLA's cost analysis of the
learner built with convolution ops (as before `nn.conv`'s products) is reported beside it:
it counts a loop's body once (scaled here by epochs x minibatches; a learner over several
devices, `--set pipeline.devices=2`, is counted per device, so times the device count)
and both branches of a run-time branch, so it includes the critic pass over every x' that
a round without truncations skips. The blocked products also multiply image blocks that
no output reads, which is not the update's work (the third count shown). "The machine
figure" is the better of the matmul's and the large convolution's medians; the learner's
ratio is to that one.
"""

from __future__ import annotations

import sys
import time

import harness  # beside this script in scripts/
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import jaxrl_async
from jaxrl_async.host.executor import make_actor_envs, make_host_agent, make_learner
from jaxrl_async.nn import conv
from jaxrl_async.nn.torsos import NATURE_CONV, NATURE_FEATURES
from jaxrl_async.types import Transition

LARGE_CONV = (32, 32, 128, 3, 128)  # batch, size, channels in, kernel, channels out
DN = ("NHWC", "HWIO", "NHWC")


def timed(compiled, *args) -> float:
    """Seconds of one call of `compiled` (results waited for)."""
    start = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    return time.perf_counter() - start


def flops_of(compiled) -> float:
    """XLA's cost-analysis FLOPs of a compiled program (loop bodies counted once)."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return float(cost["flops"])


def rate_program(fn, args: tuple, flops: float):
    """A round's program: one timed call of jit(fn)(*args), as seconds and FLOP/s."""
    compiled = jax.jit(fn).lower(*args).compile()
    jax.block_until_ready(compiled(*args))  # pages touched, threads started

    def call(_round: int) -> dict:
        seconds = timed(compiled, *args)
        return {"seconds": seconds, "flops_per_s": flops / seconds}

    return call


def machine_programs(n: int) -> dict:
    """The machine's dense f32 figures: a square matmul, a large convolution, and the
    Nature torso's first convolution forward."""
    key = jax.random.key(0)
    a = jax.random.normal(key, (n, n), jnp.float32)
    batch, size, c_in, k, c_out = LARGE_CONV
    x = jax.random.normal(key, (batch, size, size, c_in), jnp.float32)
    w = jax.random.normal(key, (k, k, c_in, c_out), jnp.float32)
    out = size - k + 1
    channels, kernel, stride = NATURE_CONV[0]
    frames = jax.random.uniform(key, (256, 84, 84, 4), jnp.float32)
    w1 = jax.random.normal(key, (kernel, kernel, 4, channels), jnp.float32)
    side = (84 - kernel) // stride + 1

    def conv(x, w, s):
        return lax.conv_general_dilated(x, w, (s, s), "VALID", dimension_numbers=DN)

    return {
        "matmul": rate_program(jnp.matmul, (a, a), 2.0 * n**3),
        "conv": rate_program(
            lambda x, w: conv(x, w, 1), (x, w), 2.0 * batch * out * out * k * k * c_in * c_out
        ),
        "nature conv1": rate_program(
            lambda x, w: conv(x, w, stride),
            (frames, w1),
            2.0 * 256 * side * side * kernel * kernel * 4 * channels,
        ),
    }


def nature_forward_flops(size: int, channels: int, actions: int) -> tuple[float, float]:
    """(FLOPs of the Nature torso and heads forward on one frame, of which the first
    convolution's): each convolution 2 k^2 C_in C_out per output pixel, the dense layers
    2 in x out, the policy and value heads on the features."""
    total, first = 0.0, 0.0
    for channels_out, kernel, stride in NATURE_CONV:
        size = (size - kernel) // stride + 1
        layer = 2.0 * size * size * kernel * kernel * channels * channels_out
        first = first or layer
        total += layer
        channels = channels_out
    total += 2.0 * size * size * channels * NATURE_FEATURES
    total += 2.0 * NATURE_FEATURES * (actions + 1)
    return total, first


def analytic_flops(config, spec) -> dict:
    """The Nature torso's FLOPs in PPO's value pass and in one whole update (module
    docstring)."""
    forward, first = nature_forward_flops(spec.obs_shape[0], spec.obs_shape[2], spec.num_actions)
    frames = config.pipeline.rollout_len * config.env.num_envs
    backward = 2 * forward - first  # no gradient for the frames themselves
    value_pass = (frames + config.env.num_envs) * forward  # V(x_t), V(the last x')
    update = value_pass + config.agent.num_epochs * frames * (forward + backward)
    return {"value_pass": value_pass, "update": update}


def random_trajectory(config, spec) -> Transition:
    """A trajectory [T, B] of the run's shape: random frames, actions and rewards, and
    terminations; no truncation, which an Atari episode meets only after 27,000 steps, so
    the value pass takes the branch a run's rounds take (the critic on x_t alone)."""
    shape = (config.pipeline.rollout_len, config.env.num_envs)
    rng = np.random.default_rng(0)

    def frames():
        return jnp.asarray(rng.integers(0, 256, (*shape, *spec.obs_shape), dtype=np.uint8))

    return Transition(
        obs=frames(),
        action=jnp.asarray(rng.integers(0, spec.num_actions, shape), jnp.int32),
        reward=jnp.asarray(rng.random(shape), jnp.float32),
        terminated=jnp.asarray(rng.random(shape) < 0.01),
        truncated=jnp.zeros(shape, bool),
        next_obs=frames(),
        extras={"log_prob": jnp.full(shape, -np.log(spec.num_actions), jnp.float32)},
        version=jnp.zeros(shape, jnp.int32),
    )


def learner_programs(config, products: bool = True, flops: dict | None = None):
    """({"value pass": ..., "learner": ...}, XLA's FLOP counts of the programs): the
    agent's value pass and update for the config's host env, jitted as the executor jits
    them, rated by `flops` (default: their own analytic counts). With `products` False,
    built with every convolution a convolution op, as before `nn.conv`'s matrix products."""
    envs = make_actor_envs(config)
    spec = envs[0].spec
    for env in envs:
        env.close()
    chosen = conv._as_product
    conv._as_product = chosen if products else lambda *_: None
    try:  # compiled while the convolution's choice stands
        return _compiled_learner(config, spec, flops)
    finally:
        conv._as_product = chosen


def _compiled_learner(config, spec, flops: dict | None) -> tuple[dict, dict]:
    agent = make_host_agent(config, spec)
    learner = make_learner(config, agent, spec, jax.random.key(0))
    learn, at = learner.learn, learner.device
    # placed as the executor places them: on the learner's mesh, the batch split on B
    state, one = agent.init(jax.random.key(0)), random_trajectory(config, spec)
    traj = jax.device_put(one, learner.batch_at or at)
    key = jax.device_put(jax.random.key(1), at)
    state_at = jax.device_put(state, at)
    compiled = learn.lower(state_at, traj, key).compile()
    targets = jax.jit(agent.targets).lower(state, one).compile()  # on one device
    # a learner over a mesh of n devices is counted per device: each runs 1/n of it
    once = flops_of(compiled) * len(at.device_set)
    value_pass = flops_of(targets)
    steps = config.agent.num_epochs * config.agent.num_minibatches
    counted = {
        "xla_value_pass": value_pass,
        "learn_loops_once": once,
        "xla_update": value_pass + steps * (once - value_pass),
        **analytic_flops(config, spec),
    }
    rate = counted if flops is None else flops
    programs = {
        "value pass": rate_program(agent.targets, (state, one), rate["value_pass"]),
        "learner": rate_program(learn, (state_at, traj, key), rate["update"]),
    }
    return programs, counted


def rows_of(runs: dict, flops: dict) -> tuple[list[list[str]], str]:
    """The table's rows and the name of the machine figure."""
    best = max(("matmul", "conv"), key=lambda n: np.median(harness.of(runs[n], "flops_per_s")))
    figure = float(np.median(harness.of(runs[best], "flops_per_s")))
    rows = []
    for name, figures in runs.items():
        rates = harness.of(figures, "flops_per_s")
        rows.append(
            [
                name,
                harness.cell(harness.of(figures, "seconds"), ".3g"),
                harness.cell([r / 1e9 for r in rates], ".3g"),
                harness.cell([r / figure for r in rates], ".2f"),
            ]
        )
    rows.append(
        [
            f"(an update's FLOPs, rating every program: {flops['update'] / 1e9:.1f} G, the "
            f"torso's analytic count; XLA counts {flops['xla_update'] / 1e9:.1f} G with "
            "convolution ops, both branches of the value pass, and "
            f"{flops['products_update'] / 1e9:.1f} G with the products)",
            "",
            "",
            "",
        ]
    )
    return rows, best


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("--matmul", type=int, default=2048, help="the square matmul's side")
    p.add_argument("--config", default="ppo_atari_breakout")
    p.add_argument("--set", action="append", default=[], help="a config override, k=v")
    p.add_argument(
        "--before",
        action="store_true",
        help="also the learner with every convolution a convolution op (no matrix products)",
    )
    args = p.parse_args(argv)
    config = jaxrl_async.load_config(args.config, args.set)
    older, flops = learner_programs(config, products=False)
    learners, counted = learner_programs(config, flops=flops)
    flops["products_update"] = counted["xla_update"]
    programs = {**machine_programs(args.matmul), **learners}
    if args.before:
        programs.update({f"{name}, convolution ops only": p for name, p in older.items()})
    runs = harness.interleave(programs, args.repeats)
    rows, best = rows_of(runs, flops)
    columns = ["program", "s per call", "GFLOP/s", f"ratio to the machine figure ({best})"]
    return harness.report(
        __file__, argv, columns, rows, args.json, runs=runs, flops=flops, machine_figure=best
    )


if __name__ == "__main__":
    sys.exit(main())
