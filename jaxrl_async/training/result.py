"""What `train` and `resume` return, whichever engine trained the run."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np


@dataclasses.dataclass
class TrainResult:
    """A run's end: its final state, its log records as arrays, its summary and directory."""

    state: Any  # the final training state (a PipelineState; a host run: the learner's)
    metrics: dict[str, np.ndarray]  # one entry per log point
    summary: dict
    """summary.json's object: the run's `training.summary.RunSummary` as a dict of its
    fields (`RunSummary.to_dict`), the common ones and the run's engine's own (a JAX env's
    run has no `policy_lag`, a host run no `compile_cache_hits`), keys and values as
    written to summary.json."""
    run_dir: Path | None
    # with a RunGroup: each point's log records, as a run of its seeds alone would log them
    point_records: list[list[dict]] | None = None
