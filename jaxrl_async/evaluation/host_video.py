"""Videos of a host-env run: Gymnasium's own frames (`render_mode="rgb_array"`), taken
in `host.evaluate.evaluate_host`'s loop before each step, of the envs whose first
episode still runs: the same frame rule as a JAX env's (`record.py`), one frame per
step of an episode, from the state after reset to the one before the final action."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import numpy as np

from jaxrl_async.config.loader import Config
from jaxrl_async.errors import ConfigError
from jaxrl_async.evaluation.renderers import quiet_pygame

FPS = 30.0


def record_host_run(run_dir: Path, config: Config, seed: int, shown: int):
    """(step, returns [N], lengths [N], frames, fps) of the run's latest checkpoint, the
    frames those of the first `shown` episodes."""
    from jaxrl_async.evaluation.host import evaluate_host

    with contextlib.suppress(ImportError):  # an env that draws without pygame needs none
        quiet_pygame()
    if "render_mode" in config.env.kwargs:
        raise ConfigError("env.kwargs.render_mode is the video's own (rgb_array)")
    kwargs = {**config.env.kwargs, "render_mode": "rgb_array"}
    config = dataclasses.replace(config, env=dataclasses.replace(config.env, kwargs=kwargs))
    episodes: list[list[np.ndarray]] = [[] for _ in range(config.eval.episodes)]

    def watch(env, running: np.ndarray) -> None:
        shown = env.env.render()
        if shown is None or len(shown) != len(episodes) or shown[0] is None:
            raise ConfigError(f"env {config.env.name} returns no rgb_array frames to render")
        for i in np.flatnonzero(running):
            episodes[i].append(np.asarray(shown[i]))

    step, returns, lengths = evaluate_host(config, run_dir, seed, watch=watch)
    frames = (frame for episode in episodes[:shown] for frame in episode)
    return step, returns, lengths, frames, FPS
