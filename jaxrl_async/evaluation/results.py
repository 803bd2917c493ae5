"""What an evaluation reports, whichever engine trained the run: the log record's fields
(`summarize`, NO_EVAL where a record has none) and eval.json's (`eval_result`), with the
run's eval settings as `eval` overrides them (`eval_settings`)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from jaxrl_async.config.sections import EvalConfig

# The log-record fields of an evaluation; a record without one carries NO_EVAL.
NO_EVAL = {
    "eval_return_mean": math.nan,
    "eval_return_std": math.nan,
    "eval_episodes": 0,
    "eval_length_mean": math.nan,
}


def check_one_seed(run_dir: Path, num_seeds: int) -> None:
    """A UserError of one line for a run that trained several seeds side by side
    (train.num_seeds > 1): its checkpoint holds every seed's state, which `eval` and
    videos, built for one, do not restore yet."""
    if num_seeds > 1:
        from jaxrl_async.errors import UserError

        raise UserError(
            f"{run_dir} trained {num_seeds} seeds side by side (train.num_seeds={num_seeds}): "
            "eval and videos restore one seed's state, not several yet; train a seed alone "
            "(train.num_seeds=1 train.seed=S) to evaluate it"
        )


def summarize(returns, lengths) -> dict:
    """The log-record fields (NO_EVAL's keys) of one evaluation's [N] returns and lengths."""
    returns = np.asarray(returns, np.float64)
    return {
        "eval_return_mean": float(returns.mean()),
        "eval_return_std": float(returns.std()),
        "eval_episodes": int(returns.size),
        "eval_length_mean": float(np.mean(np.asarray(lengths, np.float64))),
    }


def eval_settings(config: EvalConfig, episodes: int | None, mode: str | None) -> EvalConfig:
    """The run's eval section with the given episodes and mode (None: the run's)."""
    return dataclasses.replace(
        config,
        episodes=config.episodes if episodes is None else episodes,
        mode=config.mode if mode is None else mode,
    )


def eval_result(run_dir: Path, step: int, config: EvalConfig, seed: int, episodes) -> dict:
    """eval.json's fields: the settings and the (returns [N], lengths [N]) of `episodes`."""
    returns, lengths = episodes
    fields = summarize(returns, lengths)
    return {
        "run_dir": str(run_dir),
        "env_steps": step,
        "mode": config.mode,
        "episodes": fields["eval_episodes"],
        "seed": seed,
        "max_steps": config.max_steps,
        "return_mean": fields["eval_return_mean"],
        "return_std": fields["eval_return_std"],
        "length_mean": fields["eval_length_mean"],
        "returns": [float(r) for r in returns],
        "lengths": [int(n) for n in lengths],
    }
