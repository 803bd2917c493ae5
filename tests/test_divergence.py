"""Divergence: a non-finite loss, gradient norm or parameter stops the run (exit 3, one
line naming the update) without a checkpoint of the non-finite state, or, under
train.nan_policy=warn, is said once while the run goes on."""

import json
import math

import numpy as np
import pytest

from jaxrl_async.errors import DIVERGED_EXIT, TrainingDiverged
from jaxrl_async.run import checkpoint
from jaxrl_async.run.divergence import DivergenceGuard, non_finite
from tests.helpers.cli import run_cli_in_process
from tests.helpers.configs import PPO_SMALL
from tests.helpers.faults import all_finite, stored_arrays

K = 4  # ticks per host call in the synthetic metrics


def _metrics(seeds: int = 1, **bad):
    """A host call's metrics: `name=(run, tick, value)` puts value there."""
    shape = (K,) if seeds == 1 else (seeds, K)
    metrics = {
        "episodes": np.full(shape, np.nan),  # not checked
        "grad_norm": np.ones(shape),
        "loss": np.ones(shape),
        "param_abs_max": np.ones(shape),
    }
    for name, (run, tick, value) in bad.items():
        metrics[name][(tick,) if seeds == 1 else (run, tick)] = value
    return metrics


def test_the_earliest_non_finite_checked_metric_is_found():
    assert non_finite(_metrics(), K, 1) == []
    [found] = non_finite(_metrics(loss=(0, 2, np.inf), grad_norm=(0, 3, np.nan)), K, 1)
    assert (found.metric, found.value, found.tick, found.run) == ("loss", math.inf, 2, None)
    # Ties go to the first key; each run of several is reported, earliest first.
    found = non_finite(
        _metrics(3, loss=(2, 1, np.nan), grad_norm=(2, 1, np.nan), param_abs_max=(0, 3, np.inf)),
        K,
        3,
    )
    assert [(f.metric, f.tick, f.run) for f in found] == [
        ("grad_norm", 1, 2),
        ("param_abs_max", 3, 0),
    ]
    # A value given once a call (split placement's param_abs_max) stands for its last tick.
    [found] = non_finite({"param_abs_max": [np.nan]}, K, 1)
    assert found.tick == K - 1


def test_stop_names_the_update_and_env_step_and_warn_says_it_once_per_run():
    stop = DivergenceGuard("stop", K, 128, 2, print, lambda k: f"seed {7 + k}")
    stop.check(1, _metrics(2))
    with pytest.raises(TrainingDiverged) as raised:
        stop.check(3, _metrics(2, loss=(1, 2, np.nan)))
    assert str(raised.value) == (
        "training diverged: loss is nan at update 11 (env step 1,408) in seed 8; "
        "no checkpoint was written"
    )
    lines: list[str] = []
    warn = DivergenceGuard("warn", K, 128, 2, lines.append, lambda k: f"seed {k}")
    warn.check(1, _metrics(2, loss=(1, 0, np.nan)))
    warn.check(2, _metrics(2, loss=(1, 0, np.nan)))  # the same run again: said already
    warn.check(3, _metrics(2, loss=(0, 1, np.nan)))
    assert [line.split(" at ")[1].split(";")[0] for line in lines] == [
        "update 1 (env step 128) in seed 1",
        "update 10 (env step 1,280) in seed 0",
    ]


# The env's rewards turn NaN at each env's 600th step: tick 19 of 32-step rollouts, so
# update 19 diverges, in the third host call of 8 ticks; checkpoints every 1,024 steps.
POISONED = [
    *PPO_SMALL,
    "env.name=tests.helpers.poisoned_env:cartpole",
    "checkpoint.every=1024",
]


def test_a_diverged_run_stops_with_its_finite_checkpoints_and_warn_trains_on(tmp_path):
    run_dir = tmp_path / "stop"
    code, err = run_cli_in_process("train", *POISONED, "--run-dir", str(run_dir), cwd=tmp_path)
    assert code == DIVERGED_EXIT
    assert err.splitlines() == [
        "jaxrl-async: error: training diverged: grad_norm is nan at update 19 (env step "
        f"2,432); the last finite checkpoint is {run_dir / 'checkpoints' / '2048'}"
    ]
    steps = checkpoint.steps(run_dir / "checkpoints")
    assert steps == [1024, 2048]
    assert all(all_finite(stored_arrays(run_dir / "checkpoints", s)) for s in steps)
    assert not (run_dir / "summary.json").exists()

    run_dir = tmp_path / "warn"
    code, err = run_cli_in_process(
        "train", *POISONED, "train.nan_policy=warn", "--run-dir", str(run_dir), cwd=tmp_path
    )
    assert code == 0, err
    assert err.splitlines() == [
        "warning: training diverged: grad_norm is nan at update 19 (env step 2,432); "
        "going on (train.nan_policy=warn)"
    ]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 4096 and summary["warnings"] == err.splitlines()
    assert checkpoint.steps(run_dir / "checkpoints")[-1] == 4096


def test_a_host_env_run_stops_as_a_jax_env_run_does(tmp_path):
    """A host env whose rewards overflow the loss: exit 3 naming the update, and no
    checkpoint of the diverged learner."""
    run_dir = tmp_path / "run"
    env = "gymnasium:tests.helpers.host_envs:HostFaulty-v0"
    args = [
        *(f"env.name={env}", "env.kwargs={fail_at: 30, failure: huge_reward}"),
        *("env.num_envs=4", "pipeline.rollout_len=4", "agent.hidden_sizes=[8]"),
        *("agent.num_minibatches=2", "train.log_every=32", "train.progress=false"),
        *("train.total_steps=256", "checkpoint.every=32"),
    ]
    code, err = run_cli_in_process(
        "train", "ppo_cartpole", *args, "--run-dir", str(run_dir), cwd=tmp_path
    )
    assert code == DIVERGED_EXIT, err
    # Each env's 30th step pays 1e38: the eighth round of four steps an env.
    assert err.splitlines() == [
        "jaxrl-async: error: training diverged: grad_norm is nan at update 8 (env step 128); "
        f"the last finite checkpoint is {run_dir / 'checkpoints' / '96'}"
    ]
    steps = checkpoint.steps(run_dir / "checkpoints")
    assert steps == [32, 64, 96]
    assert all(all_finite(stored_arrays(run_dir / "checkpoints", s)) for s in steps)


def test_a_sweep_warns_of_its_diverged_point_by_name_and_finishes(tmp_path):
    """One point's learning rate diverges at once: the group trains on, the warning
    names that point, and the sweep writes its table."""
    sweep_dir = tmp_path / "sweep"
    code, err = run_cli_in_process(
        "sweep",
        "ppo_cartpole",
        *PPO_SMALL,
        "train.total_steps=2048",
        "agent.learning_rate=[1e-3,1e30]",
        "--sweep-dir",
        str(sweep_dir),
        cwd=tmp_path,
    )
    assert code == 0, err
    [warning] = [line for line in err.splitlines() if "diverged" in line]
    assert warning.startswith("warning: training diverged: ")
    assert " at update 1 (env step 128) in point 1 (" in warning
    assert len(json.loads((sweep_dir / "sweep.json").read_text())["points"]) == 2
