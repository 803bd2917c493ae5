"""`jaxrl-async eval RUN_DIR --video PATH`: the latest checkpoint's evaluation, its first
episode as a GIF or MP4 (as other trainers' video recorders give one episode), or with
`--episodes N` every one of the N, one after another; plus the evaluation's
RUN_DIR/eval.json."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from jaxrl_async.config.loader import engine_kind
from jaxrl_async.evaluation.renderers import headless_gl, renderer_for
from jaxrl_async.evaluation.results import check_one_seed, eval_result, eval_settings
from jaxrl_async.evaluation.writer import check_video_path, write_video
from jaxrl_async.run import rundir


def record_video(
    run_dir: str | Path,
    path: str | Path,
    episodes: int | None = None,
    mode: str | None = None,
    seed: int | None = None,
    *,
    env=None,
    env_params=None,
) -> dict:
    """Evaluate the run's latest checkpoint as `evaluate.evaluate_run` does (the same
    numbers, also written to RUN_DIR/eval.json) and write its episodes to `path` (.gif or
    .mp4): the first episode when `episodes` is None (the evaluation still runs the run's
    eval.episodes), else all of them. The result adds "video" (the path),
    "video_episodes" and "frames" (one per episode step).
    A path of another format, a missing imageio and an env that cannot be rendered are
    one-line UserErrors, raised before anything is evaluated."""
    path = check_video_path(path)
    headless_gl()  # before an env suite imports MuJoCo (Brax, Gymnasium's MuJoCo envs)
    run_dir = Path(run_dir)
    config = rundir.resume_config(run_dir)
    check_one_seed(run_dir, config.train.num_seeds)
    eval_config = eval_settings(config.eval, episodes, mode)
    config = dataclasses.replace(config, eval=eval_config)
    seed = config.train.seed if seed is None else seed
    shown = 1 if episodes is None else eval_config.episodes
    if engine_kind(config, env) == "host":
        from jaxrl_async.evaluation.host_video import record_host_run

        step, returns, lengths, frames, fps = record_host_run(run_dir, config, seed, shown)
    else:
        from jaxrl_async.evaluation.record import record_run

        def render(env, env_params):
            return renderer_for(config.env.name, env, env_params)

        step, returns, lengths, frames, fps = record_run(
            run_dir, config, seed, render, shown, env, env_params
        )
    count = write_video(path, frames, fps)
    result = eval_result(run_dir, step, eval_config, seed, (returns, lengths))
    (run_dir / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
    return {**result, "video": str(path), "video_episodes": shown, "frames": count}
