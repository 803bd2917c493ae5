"""`eval.video=true`: every periodic evaluation also records its first episode, which the
run's log shows as a GIF (TensorBoard's image tab, W&B's media panel).

`RecordingEvaluation` is the run's `Evaluation` with its program swapped for the
recording one (`record.py`): the same key, envs, policy and steps, so the logged
numbers are those of a run without videos, and nothing runs twice. It is chosen when the
run is built; an env no renderer draws is refused then, in one line, before training.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from jaxrl_async import envs as envs_lib
from jaxrl_async.config.loader import Config
from jaxrl_async.evaluation.evaluate import Evaluation, eval_parts
from jaxrl_async.evaluation.record import eval_args, frames_of, make_recorder, record_episodes
from jaxrl_async.evaluation.renderers import renderer_for
from jaxrl_async.types import Agent


class RecordingEvaluation(Evaluation):
    """An `Evaluation` whose call also leaves `video`: (frames [T, H, W, 3] uint8, frames a
    second) of the first episode it evaluated."""

    def __init__(self, config: Config, agent: Agent, env=None, env_params=None, device=None):
        super().__init__(config, agent, env, env_params, device)
        env, env_params = envs_lib.resolve(config.env, env, env_params)
        self.renderer = renderer_for(config.env.name, env, env_params)
        parts = eval_parts(agent, env, env_params, config.eval, config.env.normalize_obs)
        self._recorder = make_recorder(parts, self.renderer.select)
        self.video: tuple[np.ndarray, float] | None = None

    def start_compile(self) -> None:
        """Nothing ahead of time: the recording programs compile on the first call."""

    def wait_compiled(self) -> None:
        """As `start_compile`."""

    def episodes(self, state, env_steps: int) -> tuple[np.ndarray, np.ndarray]:
        jax.block_until_ready(state.learner.params)  # time the evaluation, not training
        start = time.perf_counter()
        args = eval_args(state, env_steps, self.seed, self.impl, self.device)
        returns, lengths, first = record_episodes(self._recorder, args, keep=1)
        self.video = (np.stack(list(frames_of(self.renderer, first))), self.renderer.fps)
        self.seconds += time.perf_counter() - start
        return returns, lengths
