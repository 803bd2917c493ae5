"""Exact-resume checks: the same state leaf for leaf, the same log records, and a run
interrupted at a log point then resumed against the uninterrupted one."""

import json
import os
import signal

import jax
import numpy as np
import pytest


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
    assert [{k: v for k, v in r.items() if k not in drop} for r in a] == \
        [{k: v for k, v in r.items() if k not in drop} for r in b]


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


def assert_resume_is_bitwise(config, tmp_path, reference=None, reference_dir=None):
    """Train `config` to the end (unless `reference`, a finished run of it in
    `reference_dir`, is given), then again, interrupted at its first log point and
    resumed: the same final state and log records. Returns the uninterrupted result."""
    import jaxrl_async

    if reference is None:
        reference_dir = tmp_path / "reference"
        reference = jaxrl_async.train(config, run_dir=reference_dir)
    log_points = [int(s) for s in reference.metrics["env_steps"]]
    run_dir = tmp_path / "run"
    with pytest.raises(jaxrl_async.TrainingInterrupted):
        jaxrl_async.train(config, run_dir=run_dir, callbacks=[interrupt_at(log_points[0])])
    resumed = jaxrl_async.resume(run_dir)
    assert_same_state(resumed.state, reference.state)
    assert_same_records(records(run_dir), records(reference_dir))
    return reference
