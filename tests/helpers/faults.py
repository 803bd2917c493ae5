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
    from orbax.checkpoint import JsonCheckpointHandler

    if kind == "disk_full":
        original = JsonCheckpointHandler._save_fn

        async def save_fn(self, x, directory):
            if f"{os.sep}{first_step}." not in str(directory):
                raise OSError(errno.ENOSPC, "No space left on device")
            return await original(self, x, directory)

        monkeypatch.setattr(JsonCheckpointHandler, "_save_fn", save_fn)
        return
    touch, saves = Path.touch, []

    def read_only(path, *args, **kwargs):
        if path.name == ".write-check":
            saves.append(path)
            if len(saves) > 1:
                raise OSError(errno.EROFS, "Read-only file system", str(path))
        return touch(path, *args, **kwargs)

    monkeypatch.setattr(Path, "touch", read_only)


class _FillsUp:
    """A text file on a disk with room for `lines` more writes: each after those raises
    ENOSPC, as a full disk's does."""

    def __init__(self, file, lines: int):
        self._file, self._left = file, lines

    def write(self, text: str) -> int:
        if self._left == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._left -= 1
        return self._file.write(text)

    def close(self) -> None:
        self._file.close()


def fill_disk_at(monkeypatch, name: str, writes: int = 0) -> None:
    """Make writing a run directory's file `name` fail with ENOSPC after `writes` writes
    succeed: metrics.jsonl's lines (through its sink's file), or summary.json (written
    whole through a temporary file, half of which lands before the failure; wandb.json
    likewise)."""
    import builtins

    import jaxrl_async.run.sinks

    if name in ("summary.json", "wandb.json"):
        write_text = Path.write_text

        def half_written(path, text, *args, **kwargs):
            if path.name == name + ".tmp":
                write_text(path, text[: len(text) // 2], *args, **kwargs)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return write_text(path, text, *args, **kwargs)

        monkeypatch.setattr(Path, "write_text", half_written)
        return

    def fills_up(path, *args, **kwargs):
        file = builtins.open(path, *args, **kwargs)  # noqa: SIM115  (the sink closes it)
        return _FillsUp(file, writes) if Path(path).name == name else file

    monkeypatch.setattr(jaxrl_async.run.sinks, "open", fills_up, raising=False)


def _slow_saves(pause: float, marker: Path) -> None:
    """Each checkpoint save notes itself in `marker` (one line) and then pauses `pause`
    seconds inside orbax's background write, its temporary directory half written: a
    window for a kill to land in."""
    import asyncio

    from orbax.checkpoint import JsonCheckpointHandler

    original = JsonCheckpointHandler._save_fn

    async def save_fn(self, x, directory):
        with marker.open("a") as f:
            f.write(f"{directory}\n")
        await asyncio.sleep(pause)
        return await original(self, x, directory)

    JsonCheckpointHandler._save_fn = save_fn


if __name__ == "__main__":  # python -m tests.helpers.faults PAUSE MARKER <jaxrl-async args>
    import sys

    from jaxrl_async import cli

    _slow_saves(float(sys.argv[1]), Path(sys.argv[2]))
    sys.exit(cli.main(sys.argv[3:]))
