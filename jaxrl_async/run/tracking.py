"""Weights & Biases tracking (`logger.wandb=true`): one W&B run per run directory.

A `WandbRun` is a log sink like metrics.jsonl's: `RunLog` opens one for a run's directory
(for each point's directory in a sweep, none for a sweep group's own), uploads the
resolved config (RUN_DIR/config.yaml) and hands it every record, which W&B plots against
`env_steps`. `finish(run_dir, summary)`, called where summary.json is written, uploads the
summary and ends the W&B run; a session that fails ends it at exit, marked failed.

The W&B run id, project and entity are kept in RUN_DIR/wandb.json, so a resumed run
continues the same W&B run (the records between its last checkpoint and the interruption
are logged again), whatever W&B's variables say then.

W&B users set its environment variables (WANDB_MODE=offline above all), so a `logger.*`
key left empty leaves its setting to W&B's variable, and a key set in the config wins over
the variable (`wandb_init_args`). With neither, runs go online to project "jaxrl_async",
grouped by the config's name, or for a sweep's points the sweep directory's name. W&B's
files go to RUN_DIR/wandb/ unless WANDB_DIR says otherwise (`wandb sync
RUN_DIR/wandb/offline-run-*` uploads an offline run).
"""

from __future__ import annotations

import io
import json
import math
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from jaxrl_async.config.sections import LoggerConfig
from jaxrl_async.errors import UserError
from jaxrl_async.run import rundir
from jaxrl_async.run.sinks import RunFileError

ID_FILE = "wandb.json"
DEFAULT_PROJECT = "jaxrl_async"
DEFAULT_MODE = "online"

# The W&B runs this process has open, by run directory, until their summary.json.
_OPEN: dict[Path, WandbRun] = {}


def _saved(run_dir: Path) -> dict:
    """RUN_DIR/wandb.json: the W&B run's id and where it went (project, entity), or {}."""
    try:
        saved = json.loads((run_dir / ID_FILE).read_text())
        return saved if isinstance(saved, dict) and "id" in saved else {}
    except (OSError, ValueError):
        return {}


def _save(run_dir: Path, run_id: str, project: str | None, entity: str | None) -> None:
    """RUN_DIR/wandb.json written whole; one that cannot be written is a RunFileError."""
    saved = {"id": run_id, "project": project or None, "entity": entity or None}
    try:
        rundir.write_atomic(run_dir / ID_FILE, json.dumps(saved) + "\n")
    except OSError as e:
        raise RunFileError(run_dir / ID_FILE, e) from None


def _tags(value: str) -> list[str]:
    """WANDB_TAGS as W&B reads it: comma-separated, blanks dropped."""
    return [tag.strip() for tag in value.split(",") if tag.strip()]


def wandb_init_args(
    logger: LoggerConfig, group: str, environ: Mapping[str, str] = os.environ
) -> dict[str, Any]:
    """`wandb.init`'s project, entity, group, tags and mode: each from its `logger.*` key
    where the config sets it, else from W&B's own variable (WANDB_PROJECT, WANDB_ENTITY,
    WANDB_RUN_GROUP, WANDB_TAGS, WANDB_MODE), else the project's default (None: W&B's)."""

    def env(name: str) -> str | None:
        return environ.get(name) or None

    return {
        "project": logger.wandb_project or env("WANDB_PROJECT") or DEFAULT_PROJECT,
        "entity": logger.wandb_entity or env("WANDB_ENTITY"),
        "group": logger.wandb_group or env("WANDB_RUN_GROUP") or group,
        "tags": list(logger.wandb_tags) or _tags(environ.get("WANDB_TAGS", "")) or None,
        "mode": logger.wandb_mode or env("WANDB_MODE") or DEFAULT_MODE,
    }


class WandbRun:
    """The W&B run of one run directory, as a log sink."""

    def __init__(self, logger: LoggerConfig, run_dir: Path, group: str):
        import wandb

        run_dir = Path(run_dir)
        try:
            config = yaml.safe_load((run_dir / "config.yaml").read_text())
        except OSError:
            config = None
        # A resumed run continues its W&B run where it went (the id is unique within the
        # project), whatever W&B's variables say now; only a config key moves it.
        saved = _saved(run_dir)
        args = wandb_init_args(logger, group)
        for key in ("project", "entity"):
            if not getattr(logger, f"wandb_{key}") and saved.get(key):
                args[key] = saved[key]
        run_id = str(saved.get("id") or secrets.token_hex(6))  # letters, digits, - and _
        try:
            self._run = wandb.init(
                **args,
                id=run_id,
                resume="allow",
                name=run_dir.name,
                config=config,
                dir=os.environ.get("WANDB_DIR") or str(run_dir),
                # Several W&B runs at once (a sweep's points); the console is the run's own.
                settings=wandb.Settings(reinit="create_new", console="off"),
            )
        except (wandb.errors.Error, ValueError) as e:  # ValueError: a setting W&B refuses
            lines = str(e).strip().splitlines()
            raise UserError(f"W&B: {lines[0] if lines else type(e).__name__}") from None
        try:
            _save(run_dir, run_id, self._run.project, self._run.entity)
        except RunFileError:
            self._run.finish(exit_code=1)  # not left open behind the failed run
            raise
        self._run.define_metric("env_steps")
        self._run.define_metric("*", step_metric="env_steps")
        _OPEN[run_dir.resolve()] = self

    def __call__(self, record: dict) -> None:
        self._run.log(
            {k: v for k, v in record.items() if isinstance(v, (int, float)) and math.isfinite(v)}
        )

    def video(self, env_steps: int, gif: bytes) -> None:
        """An evaluation's episode, as a GIF in the run's media ("eval/video")."""
        import wandb

        video = wandb.Video(io.BytesIO(gif), format="gif")
        self._run.log({"eval/video": video, "env_steps": env_steps})

    def close(self) -> None:
        """Nothing yet: the summary comes after the log closes (`finish`)."""

    def finish(self, summary: dict | None) -> None:
        if summary:
            self._run.summary.update(summary)
        self._run.finish()


def finish(run_dir: Path | None, summary: dict) -> None:
    """Upload `summary` to the run directory's W&B run, if it has one open, and end it."""
    run = None if run_dir is None else _OPEN.pop(Path(run_dir).resolve(), None)
    if run is not None:
        run.finish(summary)
