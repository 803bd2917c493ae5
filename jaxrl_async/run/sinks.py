"""Metric sinks: JSON lines, TensorBoard, and user callbacks; the console progress bar."""

from __future__ import annotations

import contextlib
import io
import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path

from tqdm.auto import tqdm

from jaxrl_async.errors import RunFailure


class RunFileError(RunFailure):
    """A file of a run directory that could not be written (a full disk, a read-only
    directory): one line naming the file and the OS's reason, and, once the run names it
    (`rundir.naming_intact`), the newest checkpoint left intact."""

    def __init__(self, path: Path, error: OSError):
        super().__init__(f"cannot write {path}: {error.strerror or error}")
        self.intact: str | None = None  # "RUN_DIR/checkpoints/N is intact", or why none

    def __str__(self) -> str:
        return super().__str__() + ("" if self.intact is None else f" ({self.intact})")


def _clean(value):
    return None if isinstance(value, float) and not math.isfinite(value) else value


class JsonlSink:
    """Appends each record to `path` as one JSON line, flushed at the line's end. A write
    that fails raises RunFileError (as does every call after it); the lines before it stay,
    and a line cut short is skipped when the file is read back (`rundir.read_records`)."""

    def __init__(self, path: Path):
        self._path = Path(path)
        # Open for the run's whole life, closed by close(): a context manager cannot span it.
        try:
            self._file = open(path, "a", buffering=1)  # noqa: SIM115
        except OSError as e:
            raise RunFileError(self._path, e) from None
        self._failed: OSError | None = None

    def __call__(self, record: dict) -> None:
        if self._failed is not None:
            raise RunFileError(self._path, self._failed)
        try:
            self._file.write(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
        except OSError as e:
            self._fail(e)

    def close(self) -> None:
        if self._failed is None:
            try:
                self._file.close()
            except OSError as e:  # the last line's flush
                self._fail(e)

    def _fail(self, error: OSError):
        self._failed = error
        # Closed here, its unwritten buffer dropped: close() raises nothing more.
        with contextlib.suppress(OSError):
            self._file.close()
        raise RunFileError(self._path, error) from None


class TensorBoardSink:
    """`purge_step`: a resumed run's first step; TensorBoard hides the earlier session's
    events from that step on (written after its last checkpoint)."""

    def __init__(self, log_dir: Path, purge_step: int | None = None):
        from tensorboardX import (
            SummaryWriter,  # imported lazily: protobuf is slow to load
        )

        self._writer = SummaryWriter(str(log_dir), purge_step=purge_step)

    def __call__(self, record: dict) -> None:
        step = int(record["env_steps"])
        for key, value in record.items():
            if key != "env_steps" and isinstance(value, (int, float)) and math.isfinite(value):
                self._writer.add_scalar(key, value, step)

    def video(self, env_steps: int, gif: bytes) -> None:
        """A GIF as TensorBoard shows a video: an image summary ("eval/video")."""
        from PIL import Image
        from tensorboardX.proto.summary_pb2 import Summary

        width, height = Image.open(io.BytesIO(gif)).size
        image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=gif)
        summary = Summary(value=[Summary.Value(tag="eval/video", image=image)])
        # add_video would encode the GIF itself, through moviepy; this one is made already.
        self._writer._get_file_writer().add_summary(summary, env_steps)

    def close(self) -> None:
        self._writer.close()


class Progress:
    """A tqdm bar over env steps with SPS and the latest return; silent when disabled."""

    def __init__(self, total: int, enabled: bool, desc: str = "train", initial: int = 0):
        self._enabled = enabled  # tqdm sets `disable` when closed; the summary comes after
        self._bar = tqdm(
            total=total,
            initial=initial,
            unit="step",
            unit_scale=True,
            desc=desc,
            disable=not enabled,
            dynamic_ncols=True,
            smoothing=0.3,
        )

    def update(self, record: dict) -> None:
        ret = record.get("episode_return")
        shown = "-" if ret is None or not math.isfinite(ret) else f"{ret:.1f}"
        self._bar.set_postfix_str(f"sps={record['sps']:,.0f} return={shown}", refresh=False)
        self._bar.update(int(record["env_steps"]) - self._bar.n)

    def write(self, line: str) -> None:
        if self._enabled:
            tqdm.write(line)

    def close(self) -> None:
        self._bar.close()


def emit(sinks: Iterable[Callable[[dict], None]], record: dict) -> None:
    for sink in sinks:
        sink(record)
