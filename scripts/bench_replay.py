#!/usr/bin/env python
"""Replay throughput: ring and prioritized buffers of CartPole transitions.

Every operation is repeated `steps` times inside one jitted `lax.scan` whose
carry (the buffer state) is donated, so the buffer is updated in place as in
the training pipeline; compile time is excluded. Each measurement is repeated
and reported as median [min–max]. Buffers start full; keys are Philox (the
project's default on CPU); the items an add writes are made without random
numbers, so the add is what is timed; a "cumsum" sample also writes one
priority per step, or XLA would hoist its prefix sums out of the loop. Memory: the
bytes of the state pytree on the device ("state MB"), the scratch XLA allocates
for the program ("temp MB"; a full copy of the buffer would show up there), the
state over the raw bytes of the stored items ("÷raw"), and state plus scratch
over the raw items plus a plain float32 sum tree of 2·capacity floats ("ratio";
the items alone for the uniform buffer).

    flock /tmp/cpu.lock python scripts/bench_replay.py --repeats 5 --json bench_replay.json
    python scripts/bench_replay.py --capacities 10000 --ops round1024 --seconds 0.1  # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp

from jaxrl_async.replay import prioritized, ring

OPS = ("add64", "sample256", "sample1024", "update1024", "round1024")
BETA = 0.4


def cartpole_transition():
    """One CartPole transition as the off-policy agents store it: 44 raw bytes."""
    return {
        "obs": jnp.zeros(4, jnp.float32),
        "action": jnp.int32(0),
        "reward": jnp.float32(0),
        "discount": jnp.float32(0),
        "next_obs": jnp.zeros(4, jnp.float32),
    }


def random_transitions(key, batch):
    """Random transitions to fill a buffer before timing."""
    obs_key, action_key, reward_key = jax.random.split(key, 3)
    return {
        "obs": jax.random.normal(obs_key, (batch, 4)),
        "action": jax.random.randint(action_key, (batch,), 0, 2, jnp.int32),
        "reward": jax.random.uniform(reward_key, (batch,)),
        "discount": jnp.full((batch,), 0.99, jnp.float32),
        "next_obs": jax.random.normal(obs_key, (batch, 4)) + 0.1,
    }


def step_transitions(step, batch):
    """Cheap transitions that differ every step (so XLA cannot hoist them), no random numbers:
    the add is timed, not the generation of its data."""
    n = step.astype(jnp.float32) * batch + jnp.arange(batch, dtype=jnp.float32)
    return {
        "obs": n[:, None] + jnp.arange(4, dtype=jnp.float32),
        "action": (step + jnp.arange(batch, dtype=jnp.int32)) % 2,
        "reward": n,
        "discount": jnp.full((batch,), 0.99, jnp.float32),
        "next_obs": n[:, None] + jnp.arange(4, dtype=jnp.float32) + 0.5,
    }


def checksum(sample):
    """A scalar that depends on every sampled field, so XLA cannot drop the gathers."""
    total = sample.weights.sum() + sample.probabilities.sum() + sample.indices.sum()
    for leaf in jax.tree.leaves(sample.items):
        total = total + leaf.astype(jnp.float32).sum()
    return total


def full_buffer(kind: str, capacity: int, key):
    """A buffer filled to capacity (priorities spread over 1e-3..1e2 for prioritized)."""
    item_key, priority_key = jax.random.split(key)
    items = random_transitions(item_key, capacity)
    if kind == "uniform":
        return ring.add(ring.init(capacity, cartpole_transition()), items)
    priorities = 10.0 ** jax.random.uniform(priority_key, (capacity,), minval=-3, maxval=2)
    return prioritized.add(
        prioritized.init(capacity, cartpole_transition(), alpha=0.6), items, priorities
    )


def make_step(kind: str, op: str, method: str):
    """step(state, key, i) -> (state, scalar) for one operation on one buffer kind."""

    def step(state, key, i):
        if op == "add64":
            items = step_transitions(i, 64)
            if kind == "uniform":
                return ring.add(state, items), jnp.float32(0)
            return prioritized.add(state, items), jnp.float32(0)
        if op.startswith("sample"):
            batch = int(op.removeprefix("sample"))
            if kind == "uniform":
                return state, checksum(ring.sample(state, key, batch))
            if method == "cumsum":
                # Its prefix sums depend on the priorities alone, which never change in this
                # loop, so XLA would hoist them out of it; in training they change every step.
                slot = jax.random.randint(key, (1,), 0, prioritized.size(state))
                state = prioritized.update_priorities(state, slot, jnp.ones(1))
            return state, checksum(prioritized.sample(state, key, batch, BETA, method=method))
        index_key, priority_key = jax.random.split(key)
        new_priorities = jax.random.uniform(priority_key, (1024,), minval=1e-3, maxval=1e2)
        if op == "update1024":
            indices = jax.random.randint(index_key, (1024,), 0, prioritized.size(state))
            return prioritized.update_priorities(state, indices, new_priorities), jnp.float32(0)
        if op == "round1024":
            drawn = prioritized.sample(state, index_key, 1024, BETA, method=method)
            # A learner's new priorities depend on the batch; make them depend on it here too.
            new_priorities = new_priorities * (1.0 + 0.0 * checksum(drawn))
            return (
                prioritized.update_priorities(state, drawn.indices, new_priorities),
                jnp.float32(0),
            )
        raise ValueError(op)

    return step


def compile_loop(step, state, steps: int):
    """`steps` steps in one jitted scan, the state donated; compiled ahead of time."""

    def loop(state, key):
        def body(carry, i):
            state, acc = carry
            state, value = step(state, jax.random.fold_in(key, i), i)
            return (state, acc + value), None

        (state, acc), _ = jax.lax.scan(body, (state, jnp.float32(0)), jnp.arange(steps))
        return state, acc

    key = jax.random.key(0, impl="philox4x32")
    return jax.jit(loop, donate_argnums=0).lower(state, key).compile()


def measure(kind, op, method, capacity, repeats, seconds, steps):
    state = full_buffer(kind, capacity, jax.random.key(1, impl="philox4x32"))
    raw_bytes = capacity * sum(x.nbytes for x in jax.tree.leaves(cartpole_transition()))
    state_bytes = sum(x.nbytes for x in jax.tree.leaves(state))
    # The reference: the raw items plus, for prioritized, a plain float32 sum tree
    # over the capacity (2·capacity floats), against the whole state and XLA's scratch.
    reference_bytes = raw_bytes + (8 * capacity if kind == "prioritized" else 0)
    loop = compile_loop(make_step(kind, op, method), state, steps)
    temp_bytes = loop.memory_analysis().temp_size_in_bytes
    key = jax.random.key(2, impl="philox4x32")
    start = time.perf_counter()
    state, _ = jax.block_until_ready(loop(state, key))  # warm-up, and the call count per repeat
    calls = max(1, round(seconds / (time.perf_counter() - start)))
    rates = []
    for r in range(repeats):
        start = time.perf_counter()
        for c in range(calls):
            state, _ = loop(state, jax.random.fold_in(key, r * calls + c))
        jax.block_until_ready(state)
        rates.append(calls * steps / (time.perf_counter() - start))
    batch = (
        64
        if op == "add64"
        else int(op.removeprefix("sample").removeprefix("update").removeprefix("round"))
    )
    return {
        "kind": kind,
        "op": op,
        "method": method if kind == "prioritized" else "",
        "capacity": capacity,
        "steps_per_call": steps,
        "calls_per_repeat": calls,
        "ops_per_s": spread(rates),
        "items_per_s": spread([r * batch for r in rates]),
        "raw_item_bytes": raw_bytes,
        "reference_bytes": reference_bytes,
        "state_bytes": state_bytes,
        "temp_bytes": temp_bytes,
        "memory_ratio": (state_bytes + temp_bytes) / reference_bytes,
    }


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def cases(ops, methods):
    for op in ops:
        if op in ("add64", "sample256", "sample1024"):
            yield "uniform", op, ""
        for method in methods:
            if op in ("add64", "update1024"):
                if method == methods[0]:
                    yield "prioritized", op, "tree"
            else:
                yield "prioritized", op, method


def fmt(s, scale=1.0):
    return f"{s['median'] / scale:9.1f} [{s['min'] / scale:.1f}–{s['max'] / scale:.1f}]"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capacities", default="10000,100000,1000000")
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--methods", default="tree,cumsum", help="prioritized samplers")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.3, help="length of one timed repeat")
    parser.add_argument("--steps", type=int, default=64, help="operations per compiled call")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    ops = args.ops.split(",")
    methods = args.methods.split(",")
    results = []
    print(
        f"jax {jax.__version__} on {jax.devices()}, {os.cpu_count()} CPUs; "
        f"median [min–max] of {args.repeats} timed repeats",
        file=sys.stderr,
    )
    print(
        f"{'capacity':>9} {'kind':<11} {'op':<10} {'sampler':<7} {'k ops/s':>26} "
        f"{'M items/s':>24} {'state MB':>9} {'temp MB':>8} {'÷raw':>6} {'ratio':>6}"
    )
    for capacity in (int(float(c)) for c in args.capacities.split(",")):
        for kind, op, method in cases(ops, methods):
            result = measure(kind, op, method, capacity, args.repeats, args.seconds, args.steps)
            results.append(result)
            ratio = result["memory_ratio"]
            print(
                f"{capacity:>9} {kind:<11} {op:<10} {method:<7} {fmt(result['ops_per_s'], 1e3)}"
                f" {fmt(result['items_per_s'], 1e6)} {result['state_bytes'] / 1e6:9.2f}"
                f" {result['temp_bytes'] / 1e6:8.3f}"
                f" {result['state_bytes'] / result['raw_item_bytes']:6.3f} {ratio:6.3f}",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "jax_version": jax.__version__,
                    "devices": [str(d) for d in jax.devices()],
                    "results": results,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
