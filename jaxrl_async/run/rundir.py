"""A run directory read back to resume the run: its config, metrics and checkpoints.

    RUN_DIR/config.yaml     the resolved config (rewritten when a resume changes it)
    RUN_DIR/metrics.jsonl   one record per host call
    RUN_DIR/checkpoints/    orbax checkpoints named by env steps (checkpoint.py)
    RUN_DIR/summary.json    written at the end of every session, whole (`write_summary`)

A resume continues the run's plan: the same compiled chunk of K ticks per host call
and, unless `train.total_steps` changes, the same number of calls, so it follows
the uninterrupted run bit for bit. Only the keys in RESUMABLE may differ from the
config the checkpoint was written with.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from jaxrl_async.config.loader import Config, load_config
from jaxrl_async.errors import ConfigError, UserError
from jaxrl_async.run import checkpoint as ckpt
from jaxrl_async.run.sinks import RunFileError

# Evaluation draws its own keys, so its settings do not change training either.
RESUMABLE = (
    "train.total_steps",
    "train.progress",
    "train.compile_cache",
    "train.nan_policy",
    "checkpoint.every",
    "checkpoint.keep",
    "eval.every",
    "eval.episodes",
    "eval.mode",
    "eval.max_steps",
    # Where records go besides the run directory (W&B), not what is trained.
    "logger.wandb",
    "logger.wandb_project",
    "logger.wandb_entity",
    "logger.wandb_group",
    "logger.wandb_tags",
    "logger.wandb_mode",
)


@dataclasses.dataclass(frozen=True)
class ResumePoint:
    """Where the latest checkpoint of a run directory stands."""

    step: int  # env steps in the checkpoint
    calls: int  # host calls done
    ticks: int  # ticks per host call in the run's plan (K); a resume keeps it
    train_seconds: float  # time spent in the training loop before this session
    records: list  # the metrics.jsonl records up to `step`


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def resume_config(run_dir: str | Path, overrides: Sequence[str] = ()) -> Config:
    """RUN_DIR/config.yaml with `section.key=value` overrides (see RESUMABLE)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"run directory {run_dir} not found")
    config = load_config(run_dir / "config.yaml", overrides)
    # Keep the device count and placement the run chose (the layout, and the programs
    # whose arithmetic the resumed run must repeat).
    saved = _saved_layout(run_dir)
    pins = []
    if config.pipeline.devices == 0 and saved.get("devices"):
        pins.append(f"pipeline.devices={saved['devices']}")
    if config.pipeline.placement == "auto" and "placement" in saved:
        pins.append(f"pipeline.placement={saved['placement']}")
    return load_config(run_dir / "config.yaml", [*overrides, *pins]) if pins else config


def _saved_layout(run_dir: Path) -> dict:
    """The device count and placement in the latest checkpoint's metadata (missing: no
    checkpoint, or one written before they were recorded)."""
    try:
        _, info = ckpt.read_meta(checkpoint_dir(run_dir))
    except ckpt.CheckpointError:
        return {}
    layout = {}
    if isinstance(info.get("devices"), int):
        layout["devices"] = info["devices"]
    if info.get("placement") in ("fused", "split"):
        layout["placement"] = info["placement"]
    return layout


def _flatten(tree: dict, prefix: str = "") -> dict:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        out.update(_flatten(value, name) if isinstance(value, dict) else {name: value})
    return out


def check_changes(saved_yaml: str, config: Config) -> None:
    """ConfigError naming the first key that differs outside RESUMABLE.

    Keys only one side has (added to or dropped from the schema since, or kept out of
    config.yaml) are not compared.
    """
    old = _flatten(yaml.safe_load(saved_yaml))
    new = _flatten(yaml.safe_load(config.to_yaml()))
    for key in sorted(old.keys() & new.keys()):
        if (key, old[key]) in (("pipeline.devices", 0), ("pipeline.placement", "auto")):
            continue  # chosen by the run; resume_config pins its choice
        if key not in RESUMABLE and old.get(key) != new.get(key):
            raise ConfigError(
                f"cannot change {key} when resuming (the run has "
                f"{old.get(key)!r}, asked for {new.get(key)!r}); resumable: "
                f"{', '.join(RESUMABLE)}"
            )


def resume_point(run_dir: str | Path, config: Config) -> ResumePoint:
    """The latest checkpoint of `run_dir`, checked against `config` (nothing is restored)."""
    run_dir = Path(run_dir)
    step, info = ckpt.read_meta(checkpoint_dir(run_dir))
    try:
        saved_yaml, impl = info["config"], info["prng_impl"]
        calls, ticks, seconds = int(info["calls"]), int(info["ticks"]), info["train_seconds"]
    except (KeyError, TypeError, ValueError):
        raise ckpt.CheckpointError(
            f"checkpoint {checkpoint_dir(run_dir) / str(step)} lacks the trainer's metadata"
        ) from None
    check_changes(saved_yaml, config)
    if impl != config.prng_impl:
        raise ckpt.CheckpointError(
            f"the run's keys are {impl} but train.prng resolves to "
            f"{config.prng_impl} here (another device count?)"
        )
    return ResumePoint(step, calls, ticks, float(seconds), read_records(run_dir, upto=step))


def finished(run_dir: str | Path, step: int) -> bool:
    """Whether a session of the run ended at `step`: RUN_DIR/summary.json, written last,
    is whole and counts those env steps."""
    try:
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(summary, dict) and summary.get("env_steps") == step


def read_records(run_dir: Path, upto: float) -> list[dict]:
    """metrics.jsonl records with env_steps <= `upto` (math.inf: all of them; NaN where JSON
    holds null)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by a crash
            continue
        if record.get("env_steps", math.inf) <= upto:
            records.append({k: math.nan if v is None else v for k, v in record.items()})
    return records


def write_records(run_dir: Path, records: list[dict]) -> None:
    """Replace metrics.jsonl with `records`, dropping what a session logged after its last
    checkpoint (the resumed session logs those steps again)."""
    lines = [
        json.dumps(
            {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in r.items()}
        )
        + "\n"
        for r in records
    ]
    write_atomic(Path(run_dir) / "metrics.jsonl", "".join(lines))


def checkpointer(run_dir: Path | None, keep: int, write: bool = True):
    """The run's Checkpointer of RUN_DIR/checkpoints (None without a run directory)."""
    return None if run_dir is None else ckpt.Checkpointer(checkpoint_dir(run_dir), keep, write)


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` whole: a write that fails (RunFileError) leaves the old
    file, or none, and no temporary file behind."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise RunFileError(path, e) from None


def write_summary(run_dir: Path, summary: dict) -> None:
    """RUN_DIR/summary.json, written last and whole: its presence says a session ended
    (`finished`)."""
    write_atomic(Path(run_dir) / "summary.json", json.dumps(summary, indent=2) + "\n")


@contextlib.contextmanager
def naming_intact(run_dir: Path | None):
    """A RunFileError raised inside names the newest intact checkpoint of `run_dir`, whose
    resume (`run_dir` set on the error) continues the run; without one it says so. A
    CheckpointWriteError names the run where its own line names an intact checkpoint."""
    try:
        yield
    except ckpt.CheckpointWriteError as e:
        # A save still being written that fails while the run ends (its `close`) replaces
        # what was raised: it names its intact checkpoint, and the run resumes from it.
        if run_dir is not None and e.run_dir is None and e.latest is not None:
            e.run_dir = Path(run_dir)
        raise
    except RunFileError as e:
        if run_dir is not None and e.intact is None:
            directory = checkpoint_dir(run_dir)
            try:
                done = ckpt.steps(directory)
            except Exception:  # noqa: BLE001  (the directory may be unreadable too)
                done = []
            e.intact = f"{directory / str(done[-1])} is intact" if done else "no checkpoint"
            e.run_dir = Path(run_dir) if done else None
        raise
