"""Faults a test injects into a run, and a checkpoint read back as stored: the helpers of
the divergence and crash-safety tests."""

from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp


def stored_arrays(directory: Path, step: int) -> list[np.ndarray]:
    """Every array of checkpoint `step` in `directory`, as orbax stored it (no template)."""
    manager = ocp.CheckpointManager(Path(directory).absolute(), item_names=("state", "meta"))
    try:
        restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.PyTreeRestore()))
    finally:
        manager.close()
    return [np.asarray(x) for x in jax.tree.leaves(restored["state"])]


def all_finite(arrays: list[np.ndarray]) -> bool:
    return all(np.isfinite(x).all() for x in arrays if np.issubdtype(x.dtype, np.inexact))
