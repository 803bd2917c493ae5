"""W&B's offline run files read back: what `wandb sync` would upload.

An offline run is RUN_DIR/wandb/offline-run-<time>-<id>/run-<id>.wandb: a header (":W&B",
magic 0xBEE1, version 0), then LevelDB's log format in 32 KiB blocks of chunks (CRC,
length, type: full, first, middle, last), each record a protobuf `Record` of W&B's
internal schema.
"""

import json
import struct
from pathlib import Path

# W&B offline and quiet: its files under one directory, nothing leaves this machine.
OFFLINE_ENV = {
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "WANDB_DISABLE_GIT": "true",
    "WANDB_DISABLE_CODE": "true",
    "WANDB_X_DISABLE_STATS": "true",
    "WANDB_X_DISABLE_META": "true",
}


def offline(monkeypatch, directory: Path) -> Path:
    """Point W&B at `directory` (created), offline and quiet, for one test."""
    for key, value in {**OFFLINE_ENV, "WANDB_DIR": str(directory)}.items():
        monkeypatch.setenv(key, value)
    directory.mkdir()
    return directory


BLOCK = 32 * 1024
HEADER = struct.Struct("<4sHB")
CHUNK = struct.Struct("<IHB")
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path):
    """Every protobuf Record in a .wandb file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    ident, magic, version = HEADER.unpack_from(data)
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), "not a .wandb file"
    pos, pending = HEADER.size, b""
    while pos + CHUNK.size <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK.size:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        _, length, kind = CHUNK.unpack_from(data, pos)
        if kind == 0:  # zeros: the rest of the block is padding
            pos += left
            continue
        pending += data[pos + CHUNK.size : pos + CHUNK.size + length]
        pos += CHUNK.size + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def _items(items) -> dict:
    return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}


def read_run(path: Path) -> dict:
    """{"id", "group", "name", "tags", "project", "entity", "config", "history" (logged
    dicts in order), "summary"} of
    one offline run file; the summary holds the keys set explicitly, not W&B's own."""
    run: dict = {"history": [], "summary": {}}
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            run.update(id=r.run_id, group=r.run_group, name=r.display_name, tags=list(r.tags))
            run.update(project=r.project, entity=r.entity)
            run["config"] = {
                k: v for k, v in _items(r.config.update).items() if not k.startswith("_")
            }
        elif kind == "history":
            run["history"].append(
                {k: v for k, v in _items(record.history.item).items() if not k.startswith("_")}
            )
        elif kind == "summary":
            for key, value in _items(record.summary.update).items():
                if not key.startswith("_"):
                    run["summary"][key] = value
    return run


def offline_runs(wandb_dir: Path) -> list[Path]:
    """The .wandb files of the offline runs under `wandb_dir`, oldest first, complete: W&B's
    service may still be writing a finished run's file, and stopping it flushes them all
    (the next run starts another)."""
    import wandb

    wandb.teardown()
    return sorted(Path(wandb_dir).glob("**/offline-run-*/run-*.wandb"))
