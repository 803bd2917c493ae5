"""Recording an evaluation's episodes for a video (`jaxrl-async eval RUN --video PATH`).

The recording is the evaluation itself: the same key, envs, policy and steps as
`evaluate.run_evaluation` (its returns and lengths are the evaluation's, bit for bit),
run `CHUNK` steps per call of a jitted `lax.scan` that also keeps each env's
`Renderer.select` of every step. The host pulls a chunk's selections of the envs whose
first episode is still running and draws them when the evaluation is over.

Frame rule: one frame per step of an episode, showing the state the agent acted on: the
first frame is the state after reset, the last the one before the final action. The
state an episode ends in is not shown (an env auto-resets in that very step), so an
episode of L steps has exactly L frames.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async import envs as envs_lib
from jaxrl_async.evaluation.evaluate import (
    EvalCall,
    EvalLoop,
    EvalParts,
    eval_key,
    eval_parts,
    eval_step,
    obs_stats,
    start_evaluation,
)
from jaxrl_async.evaluation.renderers import Renderer
from jaxrl_async.run import distributed

CHUNK = 64  # steps a call of the recording program runs


def _advance(parts: EvalParts, select, chunk: int, call: EvalCall, loop: EvalLoop):
    """`chunk` more steps of the evaluation (none past its end): the loop after them and,
    per step, (every env's selection [chunk, N, ...], whether it is a frame [chunk, N])."""

    def body(loop: EvalLoop, _):
        running = (loop.t < parts.limit) & jnp.any(loop.alive)
        shown = jax.vmap(select)(loop.env_state, loop.obs)
        step = functools.partial(eval_step, parts, call)
        return jax.lax.cond(running, step, lambda loop: loop, loop), (shown, loop.alive & running)

    return jax.lax.scan(body, loop, length=chunk)


class Recorder(NamedTuple):
    """The recording programs of one evaluation, jitted once (`make_recorder`)."""

    parts: EvalParts
    begin: Callable  # start_evaluation's (call, loop) from run_evaluation's arguments
    advance: Callable  # `_advance`: (call, loop) -> (loop, (selections, frame flags))


def make_recorder(parts: EvalParts, select, chunk: int = CHUNK) -> Recorder:
    return Recorder(
        parts,
        jax.jit(functools.partial(start_evaluation, parts)),
        jax.jit(functools.partial(_advance, parts, select, chunk)),
    )


def record_episodes(recorder: Recorder, args, keep: int | None = None):
    """(returns [N], lengths [N], selections): the evaluation of `args` (`run_evaluation`'s
    params, key, env_steps, obs_stats) and, per env (the first `keep`; None: all), the
    selections of its first episode's steps stacked [L_i, ...] (numpy)."""
    parts = recorder.parts
    call, loop = recorder.begin(*args)
    num_envs = parts.env_index.shape[0] if keep is None else min(keep, parts.env_index.shape[0])
    kept: list[list[Any]] = [[] for _ in range(num_envs)]
    while True:
        loop, (shown, frame) = recorder.advance(call, loop)
        shown, frame, t, alive = jax.device_get((shown, frame, loop.t, loop.alive))
        for i in np.flatnonzero(frame[:, :num_envs].any(axis=0)):
            rows = frame[:, i]
            kept[i].append(jax.tree.map(lambda x, i=i, rows=rows: x[rows, i], shown))
        if t >= parts.limit or not alive.any():
            break
    stacked = [jax.tree.map(lambda *x: np.concatenate(x), *chunks) for chunks in kept]
    returns, lengths = jax.device_get((loop.returns, loop.lengths))
    return returns, lengths, stacked


def eval_args(state, env_steps: int, seed: int, impl: str, device=None) -> tuple:
    """`run_evaluation`'s arguments for the learner in `state` (a PipelineState) at
    `env_steps`, on `device` (default: the first local one). With several processes,
    this process's copy of the parameters (`distributed.local`)."""
    args = (
        state.learner.params,
        eval_key(seed, env_steps, impl),
        jnp.int32(min(env_steps, np.iinfo(np.int32).max)),
        obs_stats(state.env_state),
    )
    return jax.device_put(distributed.local(args), device or jax.local_devices()[0])


def frames_of(renderer: Renderer, selections: list) -> Iterator[np.ndarray]:
    """Every episode's frames, one episode after another."""
    for episode in selections:
        steps = jax.tree.leaves(episode)[0].shape[0]
        for t in range(steps):
            yield renderer.draw(jax.tree.map(lambda x, t=t: x[t], episode))


def record_run(run_dir: Path, config, seed: int, render, shown: int, env=None, env_params=None):
    """(step, returns [N], lengths [N], frames, fps) of a JAX-env run's latest checkpoint
    evaluated as `config.eval` says (the run's config with the eval's settings) with
    keys of `seed`, the frames those of the first `shown` episodes;
    `render(env, env_params) -> Renderer` is asked before anything runs."""
    from jaxrl_async.evaluation.restore import restore_run

    env, env_params = envs_lib.resolve(config.env, env, env_params)
    renderer = render(env, env_params)
    step, state, agent, config = restore_run(run_dir, config, env, env_params)
    parts = eval_parts(agent, env, env_params, config.eval, config.env.normalize_obs)
    recorder = make_recorder(parts, renderer.select)
    args = eval_args(state, step, seed, config.prng_impl)
    returns, lengths, selections = record_episodes(recorder, args, keep=shown)
    return step, returns, lengths, frames_of(renderer, selections), renderer.fps
