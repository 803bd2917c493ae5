"""Checkpoints of the whole training state with orbax, checked on the way back in.

A checkpoint is a directory `<root>/<step>/` (the trainer uses the env step count)
holding two orbax items: `state`, the state pytree as nested dicts of arrays
(typed PRNG keys stored as their raw key data), and `meta`, JSON with the caller's
metadata and a description of every leaf: shape, dtype, key implementation and a
CRC-32 of its bytes. Orbax writes into `<step>.orbax-checkpoint-tmp` and renames
it when complete, so a crash mid-save leaves the earlier checkpoints as they were
(the next manager removes the leftover). Orbax checks its own index files but
not the array bytes, hence the checksums.

`restore` puts the arrays back into the structure, dtypes and shardings of a
template (a freshly built state, or its abstract `ShapeDtypeStruct`s with
shardings; a numpy leaf comes back as numpy, its dtype kept) and raises
CheckpointError, one line, when the checkpoint is missing, unreadable, corrupt or
shaped for another config.
"""

from __future__ import annotations

import contextlib
import zlib
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxrl_async.errors import RunFailure, UserError
from jaxrl_async.run import distributed
from jaxrl_async.run.orbax_quiet import quiet_failed_reads

FORMAT = 1  # bumped when the layout of `meta` changes


class CheckpointError(UserError):
    """A checkpoint that is missing, unreadable, corrupt, or not for this config."""


def _part(entry) -> str:
    for attr in ("name", "key", "idx"):  # GetAttrKey, DictKey / FlattenedIndexKey, SequenceKey
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def _leaves(tree) -> list[tuple[str, Any]]:
    """(slash-separated name, leaf) for every leaf; None fields have no leaves."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [("/".join(_part(e) for e in path), leaf) for path, leaf in flat]


def _is_key(leaf) -> bool:
    dtype = getattr(leaf, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _describe(leaf) -> dict:
    """What the checkpoint records about a leaf (array, abstract array or Python scalar)."""
    if isinstance(leaf, (bool, int, float)):
        leaf = np.asarray(leaf)
    return {"shape": list(leaf.shape), "dtype": str(leaf.dtype)}


def _host(leaf) -> np.ndarray:
    """The bytes a leaf is stored as: key data for typed keys. A leaf split over the
    devices of several processes is gathered whole (a collective: all of them save)."""
    if _is_key(leaf):
        leaf = jax.random.key_data(leaf)
    return np.asarray(distributed.gather(leaf), order="C")


def _crc(x: np.ndarray) -> int:
    # `.data`, the bytes' memoryview: numpy's stubs declare the buffer protocol from 3.12 only.
    return zlib.crc32(x.reshape(-1).view(np.uint8).data)


def _nest(items: dict[str, Any]) -> dict:
    """{"a/b": x} -> {"a": {"b": x}}: the tree orbax stores."""
    out: dict = {}
    for name, value in items.items():
        *parents, last = name.split("/")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return out


def _flat(nested: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in nested.items():
        name = f"{prefix}/{k}" if prefix else str(k)
        out.update(_flat(v, name) if isinstance(v, dict) else {name: v})
    return out


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return (lines[0] if lines else type(e).__name__)[:300]


def _manager(directory: Path, create: bool = False):
    # Async: a save returns once orbax holds the (host) arrays; `wait` decides whether
    # the caller then blocks until the checkpoint is on disk.
    multiprocess = {}
    if jax.process_count() > 1:
        # Several processes: each reads on its own and only process 0 writes, whole
        # (gathered) arrays, so orbax must not wait for the others at its barriers.
        me = jax.process_index()
        multiprocess["multiprocessing_options"] = ocp.options.MultiprocessingOptions(
            primary_host=me, active_processes={me}
        )
        if create:  # orbax does not create the root for a subset of processes
            directory.mkdir(parents=True, exist_ok=True)
    options = ocp.CheckpointManagerOptions(
        create=create and not multiprocess,
        enable_async_checkpointing=create,
        cleanup_tmp_directories=create,
        **multiprocess,
    )
    return ocp.CheckpointManager(
        directory.absolute(), options=options, item_names=("state", "meta")
    )


class CheckpointWriteError(RunFailure):
    """A save that could not be written (a full disk, a read-only directory): one line;
    the checkpoints before it stay as they were. `latest`: the newest (None: none)."""

    latest: int | None = None


class Checkpointer:
    """Saves to `directory` (created), keeping the latest `keep` checkpoints.

    Creating one removes temporary directories a crashed save left behind. A save
    first copies the state to host memory, so the caller may donate or overwrite
    the device arrays as soon as `save` returns. Older checkpoints are removed only once
    the new one is complete on disk; a save that fails raises CheckpointWriteError. With
    several processes every process makes one and calls `save` at the same points (the
    state is gathered across them); only the one with `write=True` (process 0) touches
    the directory.
    """

    def __init__(self, directory: str | Path, keep: int = 3, write: bool = True):
        self.directory, self._keep = Path(directory), keep
        self._writing: int | None = None  # the step of a save still being written
        self._manager = None
        if write:
            with self._failing_as(None):
                self._manager = _manager(self.directory, create=True)

    def save(self, step: int, state, meta: dict, wait: bool = True) -> Path:
        """Write `state` (any pytree of arrays, typed keys, scalars) and JSON-able `meta`.

        Returns the checkpoint's directory: complete on disk, or with `wait=False` being
        written in the background (the next save, `wait` or `close` waits for it).
        """
        arrays, leaves = {}, {}
        for name, leaf in _leaves(state):
            host = _host(leaf)
            arrays[name] = host
            leaves[name] = {
                **_describe(leaf),
                "stored_shape": list(host.shape),
                "stored_dtype": str(host.dtype),
                "crc32": _crc(host),
            }
            if _is_key(leaf):
                leaves[name]["key_impl"] = str(jax.random.key_impl(leaf))
        record = {"format": FORMAT, "step": int(step), "info": meta, "leaves": leaves}
        if self._manager is None:
            return self.directory / str(int(step))
        self.wait()  # the previous save is complete before this one starts
        with self._failing_as(int(step)):
            # A directory that takes no file fails here: once orbax has started, its
            # writer threads would wait for the directory it could not make, and keep
            # the process from exiting for minutes.
            probe = self.directory / ".write-check"
            probe.touch()
            probe.unlink()
            self._manager.save(
                int(step),
                args=ocp.args.Composite(
                    state=ocp.args.PyTreeSave(_nest(arrays)), meta=ocp.args.JsonSave(record)
                ),
                force=True,
            )
        self._writing = int(step)
        if wait:
            self.wait()
        return self.directory / str(int(step))

    def wait(self) -> None:
        """Block until every save so far is complete on disk, then drop the checkpoints
        past `keep`."""
        if self._manager is None or self._writing is None:
            return
        step, self._writing = self._writing, None
        with self._failing_as(step):
            self._manager.wait_until_finished()
            if step not in self._complete():  # orbax may log a failed write and go on
                raise OSError(f"checkpoint {step} is incomplete after its save")
            for old in self._complete()[: -self._keep]:
                self._manager.delete(old)

    def _complete(self) -> list[int]:
        assert self._manager is not None
        self._manager.reload()  # what is on disk, not what orbax expected to write
        return sorted(self._manager.all_steps())

    @contextlib.contextmanager
    def _failing_as(self, step: int | None):
        """Whatever writing raises as one CheckpointWriteError line."""
        try:
            yield
        except Exception as e:  # noqa: BLE001  (orbax, tensorstore and the OS raise many types)
            try:
                done = self._complete() if self._manager is not None else []
            except Exception:  # noqa: BLE001  (the directory may be unreadable too)
                done = []
            older = [s for s in done if step is None or s < step]
            where = self.directory if step is None else self.directory / str(step)
            kept = f"{self.directory / str(older[-1])} is intact" if older else "none before it"
            error = CheckpointWriteError(
                f"cannot write checkpoint {where}: {_first_line(e)} ({kept})"
            )
            error.latest = older[-1] if older else None
            raise error from None

    def steps(self) -> list[int]:
        if self._manager is None:
            return steps(self.directory)
        self.wait()
        return self._complete()

    def close(self) -> None:
        if self._manager is not None:
            try:
                self.wait()
            finally:
                with self._failing_as(None):
                    self._manager.close()


def steps(directory: str | Path) -> list[int]:
    """The complete checkpoints in `directory`, oldest first ([] when there is none)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    manager = _manager(directory)
    try:
        return sorted(manager.all_steps())
    finally:
        manager.close()


def _pick(directory: Path, step: int | None) -> int:
    available = steps(directory)
    if not available:
        raise CheckpointError(f"no checkpoint in {directory}")
    if step is None:
        return available[-1]
    if step not in available:
        raise CheckpointError(
            f"no checkpoint at step {step} in {directory} (have {', '.join(map(str, available))})"
        )
    return step


def _read_record(manager, directory: Path, step: int) -> dict:
    where = directory / str(step)
    try:
        record = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        record = dict(record["meta"])
    except Exception as e:  # noqa: BLE001  (orbax and tensorstore raise many types)
        raise CheckpointError(f"checkpoint {where} is unreadable: {_first_line(e)}") from None
    if record.get("format") != FORMAT or not isinstance(record.get("leaves"), dict):
        raise CheckpointError(
            f"checkpoint {where} has an unknown format "
            f"({record.get('format')!r}, expected {FORMAT})"
        )
    return record


def read_meta(directory: str | Path, step: int | None = None) -> tuple[int, dict]:
    """(step, the metadata given to `save`) of the latest checkpoint, or of `step`."""
    directory = Path(directory)
    step = _pick(directory, step)
    manager = _manager(directory)
    try:
        return step, _read_record(manager, directory, step)["info"]
    finally:
        manager.close()


def _mismatch(expected: dict[str, dict], saved: dict[str, dict]) -> str | None:
    """One line on how the checkpoint's leaves differ from the template's, or None."""
    missing = [n for n in expected if n not in saved]
    extra = [n for n in saved if n not in expected]
    if missing or extra:
        parts = []
        if missing:
            parts.append(
                f"{len(missing)} arrays missing ({', '.join(missing[:3])}"
                f"{', ...' if len(missing) > 3 else ''})"
            )
        if extra:
            parts.append(
                f"{len(extra)} unexpected ({', '.join(extra[:3])}"
                f"{', ...' if len(extra) > 3 else ''})"
            )
        return "; ".join(parts)
    for name, want in expected.items():
        have = saved[name]
        if (list(have["shape"]), have["dtype"]) != (want["shape"], want["dtype"]):
            return (
                f"{name} is {have['dtype']}{tuple(have['shape'])} in the checkpoint, "
                f"{want['dtype']}{tuple(want['shape'])} here"
            )
    return None


def _place(value: np.ndarray, like, info: dict):
    """The restored host array as the template leaf is: scalar, key array, sharded array."""
    if isinstance(like, (bool, int, float)):
        return type(like)(value)
    if isinstance(like, (np.ndarray, np.generic)):
        # Host data stays on the host, in its own dtype: a device array would make a host
        # run's float64 observation statistics float32 (JAX without x64).
        return value
    sharding = getattr(like, "sharding", None)
    # Host data first: it may go to a sharding over several processes' devices.
    placed: jax.Array = (
        jax.device_put(value, sharding) if sharding is not None else jax.device_put(value)
    )
    if "key_impl" in info:
        return jax.random.wrap_key_data(placed, impl=info["key_impl"])
    return placed


def _read_arrays(manager, step: int, record: dict, where: Path) -> dict:
    """Every array checkpoint `step` stores, as numpy, nested by name (orbax reads a
    checkpoint's whole tree); a read that fails is a one-line CheckpointError."""
    stored = {
        name: jax.ShapeDtypeStruct(tuple(info["stored_shape"]), np.dtype(info["stored_dtype"]))
        for name, info in record["leaves"].items()
    }
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), _nest(stored))
    try:
        with quiet_failed_reads():
            return manager.restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.PyTreeRestore(item=_nest(stored), restore_args=restore_args)
                ),
            )["state"]
    except Exception as e:  # noqa: BLE001  (orbax and tensorstore raise many types)
        raise CheckpointError(f"checkpoint {where} is unreadable: {_first_line(e)}") from None


def restore(
    directory: str | Path, like, step: int | None = None, *, part: bool = False
) -> tuple[Any, dict]:
    """(state, metadata) from the latest checkpoint in `directory` (or `step`).

    `like` is the template: a pytree of the state's structure whose leaves carry
    shape, dtype and (optionally) sharding, e.g. `jax.jit(init).lower(key).out_info`
    or a freshly initialised state. Raises CheckpointError on any mismatch. With
    `part=True` the template is a part of the checkpoint (an evaluation restores the
    learner without the run's replay): the checkpoint's other arrays are read (orbax reads
    a checkpoint's whole tree) and dropped.
    """
    directory = Path(directory)
    step = _pick(directory, step)
    where = directory / str(step)
    manager = _manager(directory)
    try:
        record = _read_record(manager, directory, step)
        template = _leaves(like)
        expected = {name: _describe(leaf) for name, leaf in template}
        saved = record["leaves"]
        if part:
            saved = {name: info for name, info in saved.items() if name in expected}
        problem = _mismatch(expected, saved)
        if problem:
            raise CheckpointError(
                f"checkpoint {where} does not fit this config's training state: {problem}"
            )
        arrays = _read_arrays(manager, step, record, where)
    finally:
        manager.close()

    arrays = _flat(arrays)
    leaves = []
    for name, like_leaf in template:
        info = record["leaves"][name]
        value = np.asarray(arrays.get(name))
        if (
            value.shape != tuple(info["stored_shape"])
            or _crc(np.asarray(value, order="C")) != info["crc32"]
        ):
            raise CheckpointError(f"checkpoint {where} is corrupt: {name} fails its checksum")
        leaves.append(_place(value, like_leaf, info))
    treedef = jax.tree_util.tree_structure(like)
    return jax.tree_util.tree_unflatten(treedef, leaves), record["info"]
