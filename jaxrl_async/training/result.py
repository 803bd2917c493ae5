"""What `train` and `resume` return, whichever engine trained the run."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np


@dataclasses.dataclass
class TrainResult:
    state: Any  # the final training state (a PipelineState; a host run: the learner's)
    metrics: dict[str, np.ndarray]  # one entry per log point
    summary: dict
    run_dir: Path | None
    # with a RunGroup: each point's log records, as a run of its seeds alone would log them
    point_records: list[list[dict]] | None = None
