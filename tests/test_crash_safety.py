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
from tests.helpers.resume import interrupt_at, records


def test_resume_finishes_a_run_stopped_after_its_last_checkpoint(tmp_path):
    """Ctrl-C during the last host call: the run saves its end and says to resume; the
    resume has nothing to train and finishes the run (summary.json, exit 0)."""
    config = jaxrl_async.load_config("ppo_cartpole", PPO_SMALL)
    run_dir = tmp_path / "run"
    # The record of the third of four calls is logged while the fourth runs.
    with pytest.raises(TrainingInterrupted) as stopped:
        jaxrl_async.train(config, run_dir=run_dir, callbacks=[interrupt_at(3072)])
    assert stopped.value.run_dir == run_dir  # the CLI's hint: jaxrl-async resume RUN_DIR
    assert checkpoint.steps(run_dir / "checkpoints")[-1] == 4096
    assert not (run_dir / "summary.json").exists()

    code, err = run_cli_in_process("resume", str(run_dir), cwd=tmp_path)
    assert code == 0, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 4096 and summary["resumed_from"] == 4096
    assert [r["env_steps"] for r in records(run_dir)] == [1024, 2048, 3072, 4096]
    assert summary["final_return"] == records(run_dir)[-1]["episode_return"]
    # Finished now: another resume has nothing to do.
    code, err = run_cli_in_process("resume", str(run_dir), cwd=tmp_path)
    assert code == 2 and "nothing to resume" in err and "is finished at 4,096" in err
