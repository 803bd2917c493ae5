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


def _slow_saves(pause: float, marker: Path) -> None:
    """Each checkpoint save notes itself in `marker` (one line) and then pauses `pause`
    seconds inside orbax's background write, its temporary directory half written: a
    window for a kill to land in."""
    import asyncio

    import orbax.checkpoint._src.handlers.json_checkpoint_handler as json_handler

    original = json_handler.JsonCheckpointHandler._save_fn

    async def save_fn(self, x, directory):
        with marker.open("a") as f:
            f.write(f"{directory}\n")
        await asyncio.sleep(pause)
        return await original(self, x, directory)

    json_handler.JsonCheckpointHandler._save_fn = save_fn


if __name__ == "__main__":  # python -m tests.helpers.faults PAUSE MARKER <jaxrl-async args>
    import sys

    from jaxrl_async import cli

    _slow_saves(float(sys.argv[1]), Path(sys.argv[2]))
    sys.exit(cli.main(sys.argv[3:]))
