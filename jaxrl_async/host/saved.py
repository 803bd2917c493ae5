"""The pytree a host run's checkpoint holds, for the run that saves and resumes it
(`training/host_engine.py`) and the evaluation that restores its learner
(`evaluation/host.py`)."""

from __future__ import annotations

import numpy as np

from jaxrl_async.host.obs_norm import ObsStats


def saved_state(learner, updates: int, replay=None, obs_stats: ObsStats | None = None) -> dict:
    """The pytree a checkpoint holds: {"learner", "updates"}, off-policy "replay" (the
    ReplayCarry: the replay and its carried window; no window while it holds none), and
    under env.normalize_obs "obs_stats" (the observation statistics, `obs_norm.py`)."""
    state = {"learner": learner, "updates": np.asarray(updates, np.int64)}
    if obs_stats is not None:
        state["obs_stats"] = obs_stats._asdict()
    if replay is not None:
        state["replay"] = {"replay": replay.replay}
        if replay.window is not None:
            state["replay"]["window"] = replay.window
    return state
