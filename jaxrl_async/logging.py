"""Metric sinks: JSON lines, TensorBoard, and user callbacks; the console progress bar."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path

from tqdm.auto import tqdm


def _clean(value):
    return None if isinstance(value, float) and not math.isfinite(value) else value


class JsonlSink:
    def __init__(self, path: Path):
        # Open for the run's whole life, closed by close(): a context manager cannot span it.
        self._file = open(path, "a", buffering=1)  # noqa: SIM115

    def __call__(self, record: dict) -> None:
        self._file.write(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")

    def close(self) -> None:
        self._file.close()


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
