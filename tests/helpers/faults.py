"""Faults a test injects into a run, and a checkpoint read back as stored: the helpers of
the divergence and crash-safety tests."""

import errno
import os
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


def fail_saves_after(monkeypatch, first_step: int, kind: str) -> None:
    """Make every checkpoint save after the one at `first_step` fail as `kind` would:
    "disk_full" (ENOSPC while orbax writes in the background) or "read_only" (EROFS
    on the first file the save creates)."""
    import orbax.checkpoint._src.handlers.json_checkpoint_handler as json_handler

    if kind == "disk_full":
        original = json_handler.JsonCheckpointHandler._save_fn

        async def save_fn(self, x, directory):
            if f"{os.sep}{first_step}." not in str(directory):
                raise OSError(errno.ENOSPC, "No space left on device")
            return await original(self, x, directory)

        monkeypatch.setattr(json_handler.JsonCheckpointHandler, "_save_fn", save_fn)
        return
    touch, saves = Path.touch, []

    def read_only(path, *args, **kwargs):
        if path.name == ".write-check":
            saves.append(path)
            if len(saves) > 1:
                raise OSError(errno.EROFS, "Read-only file system", str(path))
        return touch(path, *args, **kwargs)

    monkeypatch.setattr(Path, "touch", read_only)
