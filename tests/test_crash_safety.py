"""Crash safety: every `resume with:` hint works when followed, a save that cannot write
ends the run on one line with the previous checkpoint intact, and runs killed at random
moments resume to the uninterrupted run's state."""

import json

import pytest

import jaxrl_async
from jaxrl_async import checkpoint
from jaxrl_async.errors import TrainingInterrupted
from tests.helpers.cli import run_cli_in_process
from tests.helpers.configs import PPO_SMALL
from tests.helpers.faults import all_finite, fail_saves_after, stored_arrays
from tests.helpers.resume import interrupt_at, records


# PPO_SMALL's programs in two host calls of 1,024 steps.
SHORT = [*PPO_SMALL, "train.total_steps=2048"]


def test_resume_finishes_a_run_stopped_after_its_last_checkpoint(tmp_path):
    """Ctrl-C during the last host call: the run saves its end and says to resume; the
    resume has nothing to train and finishes the run (summary.json, exit 0)."""
    config = jaxrl_async.load_config("ppo_cartpole", SHORT)
    run_dir = tmp_path / "run"
    # The record of the first of two calls is logged while the second runs.
    with pytest.raises(TrainingInterrupted) as stopped:
        jaxrl_async.train(config, run_dir=run_dir, callbacks=[interrupt_at(1024)])
    assert stopped.value.run_dir == run_dir  # the CLI's hint: jaxrl-async resume RUN_DIR
    assert checkpoint.steps(run_dir / "checkpoints")[-1] == 2048
    assert not (run_dir / "summary.json").exists()

    code, err = run_cli_in_process("resume", str(run_dir), cwd=tmp_path)
    assert code == 0, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 2048 and summary["resumed_from"] == 2048
    assert [r["env_steps"] for r in records(run_dir)] == [1024, 2048]
    assert summary["final_return"] == records(run_dir)[-1]["episode_return"]
    # Finished now: another resume has nothing to do.
    code, err = run_cli_in_process("resume", str(run_dir), cwd=tmp_path)
    assert code == 2 and "nothing to resume" in err and "is finished at 2,048" in err


@pytest.mark.parametrize("kind", ["disk_full", "read_only"])
def test_a_save_that_cannot_write_ends_the_run_on_one_line(tmp_path, monkeypatch, kind):
    """The second save (the last) fails: one line, exit 1, the first checkpoint intact, and
    the printed resume command finishes the run once saves work again."""
    run_dir = tmp_path / "run"
    with monkeypatch.context() as patches:
        fail_saves_after(patches, 1024, kind)
        code, err = run_cli_in_process(
            "train",
            *SHORT,
            "checkpoint.every=1024",
            "checkpoint.keep=1",
            "--run-dir",
            str(run_dir),
            cwd=tmp_path,
        )
    assert code == 1
    [line] = err.splitlines()
    assert line.startswith(
        f"jaxrl-async: error: cannot write checkpoint {run_dir}/checkpoints/2048: "
    )
    assert line.endswith(
        f"({run_dir}/checkpoints/1024 is intact); resume with: jaxrl-async resume {run_dir}"
    )
    assert checkpoint.steps(run_dir / "checkpoints") == [1024]
    assert all_finite(stored_arrays(run_dir / "checkpoints", 1024))
    code, err = run_cli_in_process(
        *line.split("resume with: jaxrl-async ")[1].split(), cwd=tmp_path
    )
    assert code == 0, err
    assert checkpoint.steps(run_dir / "checkpoints") == [2048]
