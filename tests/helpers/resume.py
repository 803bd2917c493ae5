"""Exact-resume checks: the same state leaf for leaf, the same log records, and a callback
that interrupts a run at a log point."""

import json
import os
import signal

import jax
import numpy as np


def raw(x):
    """A leaf as numpy; typed PRNG keys as their key data."""
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)


def assert_same_state(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b)):
        assert x.dtype == y.dtype, jax.tree_util.keystr(path)
        np.testing.assert_array_equal(raw(x), raw(y), err_msg=jax.tree_util.keystr(path))


def assert_same_records(a: list[dict], b: list[dict]):
    """Equal metrics records, wall time and SPS aside (NaN equals NaN)."""
    drop = ("sps", "wall_seconds")
    assert [{k: v for k, v in r.items() if k not in drop} for r in a] == [
        {k: v for k, v in r.items() if k not in drop} for r in b
    ]


def records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def interrupt_at(env_steps):
    """A train() callback that sends this process SIGINT when a record reaches env_steps;
    train() defers it to the next host-call boundary, saves there and raises."""
    assert callable(signal.getsignal(signal.SIGINT)), "SIGINT must reach a Python handler"

    def callback(record):
        if record["env_steps"] == env_steps:
            os.kill(os.getpid(), signal.SIGINT)

    return callback
