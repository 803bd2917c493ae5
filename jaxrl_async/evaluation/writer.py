"""Writing frames to a GIF or MP4 file (imageio; MP4 through imageio-ffmpeg).

The path is checked, and imageio imported, before anything is evaluated or rendered;
the file is written next to its final name and moved there when complete, so a failed
or interrupted write leaves nothing half-written under that name.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import numpy as np

from jaxrl_async.errors import ConfigError, UserError

FORMATS = (".gif", ".mp4")
INSTALL = "pip install 'jaxrl_async[video]'"
MIN_SIDE = 128  # smaller frames (a 5x5 grid at 8 px a tile) are enlarged to about this


def check_video_path(path: str | Path) -> Path:
    """`path` as a Path once its format is known and its writer importable; else one line."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise ConfigError(f"--video {path}: the file must end in {' or '.join(FORMATS)}")
    if not path.parent.is_dir():
        raise UserError(f"--video {path}: no directory {path.parent}")
    needed = ["imageio"] + (["imageio_ffmpeg"] if path.suffix.lower() == ".mp4" else [])
    missing = [m for m in needed if importlib.util.find_spec(m) is None]
    if missing:
        what = "an MP4" if "imageio_ffmpeg" in missing else "a video"
        raise UserError(f"writing {what} needs {missing[0].replace('_', '-')}: {INSTALL}")
    return path


def fit(frame: np.ndarray, even: bool = False) -> np.ndarray:
    """An RGB uint8 frame [H, W, 3]: enlarged by a whole factor to about MIN_SIDE (pixel
    art stays sharp) and, for `even`, padded to even sides (H.264's 4:2:0 chroma)."""
    frame = np.asarray(frame)
    if frame.ndim == 2:
        frame = np.repeat(frame[..., None], 3, axis=-1)
    frame = frame[..., :3].astype(np.uint8)
    scale = max(1, MIN_SIDE // max(1, min(frame.shape[:2])))
    if scale > 1:
        frame = frame.repeat(scale, axis=0).repeat(scale, axis=1)
    if even:
        pad = ((0, frame.shape[0] % 2), (0, frame.shape[1] % 2), (0, 0))
        frame = np.pad(frame, pad)
    return frame


def write_video(path: Path, frames: Iterable[np.ndarray], fps: float) -> int:
    """Write `frames` (RGB [H, W, 3], any number of them) to `path` (a `check_video_path`
    path) at `fps` frames a second; returns how many were written. A GIF loops."""
    import imageio.v2 as imageio

    mp4 = path.suffix.lower() == ".mp4"
    partial = path.with_name(f".{path.name}.partial{path.suffix}")
    options = (
        {"fps": fps, "codec": "libx264", "macro_block_size": 1, "pixelformat": "yuv420p"}
        if mp4
        else {"duration": 1000.0 / fps, "loop": 0}  # ms a frame
    )
    count = 0
    try:
        with warnings.catch_warnings():
            # ffmpeg runs as a subprocess: fork then exec at once, which JAX's fork warning
            # (meant for a child that keeps running Python) does not concern.
            warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)
            with imageio.get_writer(partial, mode="I", **options) as writer:
                for frame in frames:
                    cast(Any, writer).append_data(fit(frame, even=mp4))
                    count += 1
        if count == 0:
            raise UserError(f"--video {path}: no frames to write")
        os.replace(partial, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return count


def gif_bytes(frames, fps: float) -> bytes:
    """`frames` [T, H, W, 3] as the bytes of a looping GIF (what a log shows)."""
    import imageio.v3 as iio

    frames = np.stack([fit(frame) for frame in frames])
    return iio.imwrite("<bytes>", frames, extension=".gif", duration=1000.0 / fps, loop=0)
