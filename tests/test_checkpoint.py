"""Checkpoints and resume: orbax round trips, extending a run, keep-last-N, crashes, bad
input (the exact-resume contract per agent is test_resume.py)."""

import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import jaxrl_async
from jaxrl_async.errors import ConfigError, UserError
from jaxrl_async.run import checkpoint as ckpt
from tests.helpers.cli import run_cli_in_process
from tests.helpers.configs import PPO_SMALL as SMALL
from tests.helpers.resume import assert_same_records, assert_same_state, records


def _fresh_state(config):
    from jaxrl_async.pipeline.build import build_pipeline

    pipeline, _ = build_pipeline(config)
    key = jax.random.key(config.train.seed, impl=config.prng_impl)
    lowered = jax.jit(pipeline.init).lower(key)
    return jax.jit(pipeline.init)(key), lowered.out_info


# ---------------------------------------------------------------------------------------------
# run/checkpoint.py


@pytest.mark.slow
def test_save_restore_round_trip_keeps_keys_ints_and_shardings(tmp_path):
    config = jaxrl_async.load_config("ppo_cartpole_async", SMALL)
    state, abstract = _fresh_state(config)
    assert jax.dtypes.issubdtype(state.key.dtype, jax.dtypes.prng_key)
    tree = {"state": state, "calls": 7, "rate": 0.5, "nothing": None}
    saver = ckpt.Checkpointer(tmp_path, keep=2)
    saver.save(128, tree, {"note": "hello"})
    saver.close()

    # Into the abstract layout of a freshly built state (what resume uses) ...
    restored, meta = ckpt.restore(
        tmp_path, {"state": abstract, "calls": 0, "rate": 0.0, "nothing": None}
    )
    assert meta == {"note": "hello"}
    assert restored["calls"] == 7 and type(restored["calls"]) is int
    assert restored["rate"] == 0.5 and restored["nothing"] is None
    assert_same_state(restored["state"], state)
    for x, like in zip(jax.tree.leaves(restored["state"]), jax.tree.leaves(abstract)):
        assert x.sharding == like.sharding
    assert str(restored["state"].key.dtype) == str(state.key.dtype)
    # ... or into a concrete one.
    again, _ = ckpt.restore(tmp_path, tree)
    assert_same_state(again["state"], state)


@pytest.mark.slow
def test_restore_into_another_configs_state_names_the_mismatch(tmp_path):
    small = jaxrl_async.load_config("ppo_cartpole", SMALL)
    wider = jaxrl_async.load_config("ppo_cartpole", SMALL + ["agent.hidden_sizes=[32,32]"])
    saver = ckpt.Checkpointer(tmp_path)
    saver.save(1, _fresh_state(small)[0], {})
    saver.close()
    with pytest.raises(ckpt.CheckpointError) as info:
        ckpt.restore(tmp_path, _fresh_state(wider)[1])
    message = str(info.value)
    assert "\n" not in message and "does not fit" in message
    assert "Dense_0/kernel is float32(16, 2) in the checkpoint, float32(32, 2) here" in message
    assert isinstance(info.value, UserError)


def _flip_a_byte_of_the_largest_array_file(checkpoint):
    """Orbax checksums its index but not the array data: only our CRC sees this. (With a
    tiny state the largest file may hold bytes no array reads: this needs large arrays.)"""
    files = (checkpoint / "state" / "ocdbt.process_0" / "d").iterdir()
    path = max(files, key=lambda p: p.stat().st_size)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_flipped_array_bytes_fail_the_checksum(tmp_path):
    tree = {
        "weights": np.random.default_rng(0).standard_normal((256, 256), np.float32),
        "step": np.int32(3),
    }
    saver = ckpt.Checkpointer(tmp_path)
    saver.save(1, tree, {})
    saver.close()
    _flip_a_byte_of_the_largest_array_file(tmp_path / "1")
    with pytest.raises(ckpt.CheckpointError, match="is corrupt: weights fails its checksum"):
        ckpt.restore(tmp_path, tree)


def test_missing_checkpoint_raises(tmp_path):
    with pytest.raises(ckpt.CheckpointError, match="no checkpoint in"):
        ckpt.restore(tmp_path / "nowhere", {})
    (tmp_path / "empty").mkdir()
    with pytest.raises(ckpt.CheckpointError, match="no checkpoint in"):
        ckpt.read_meta(tmp_path / "empty")


# ---------------------------------------------------------------------------------------------
# Resume


@pytest.mark.slow
def test_extending_a_finished_run_equals_the_longer_run(tmp_path):
    """With nothing that depends on the run's length (no LR annealing), a finished 4096-step
    run extended to 8192 is the 8192-step run: both use host calls of 8 ticks."""
    overrides = SMALL + ["agent.anneal_lr=false"]
    longer = jaxrl_async.train(
        jaxrl_async.load_config("ppo_cartpole", overrides + ["train.total_steps=8192"]),
        run_dir=tmp_path / "longer",
    )
    run_dir = tmp_path / "run"
    jaxrl_async.train(jaxrl_async.load_config("ppo_cartpole", overrides), run_dir=run_dir)
    with pytest.raises(UserError, match="nothing to resume"):
        jaxrl_async.resume(run_dir)

    extended = jaxrl_async.resume(run_dir, ["train.total_steps=8192"])
    assert_same_state(extended.state, longer.state)
    assert [r["env_steps"] for r in records(run_dir)] == list(range(1024, 8193, 1024))
    assert_same_records(records(run_dir), records(tmp_path / "longer"))
    assert jaxrl_async.load_config(run_dir / "config.yaml").train.total_steps == 8192


@pytest.mark.slow
def test_resume_refuses_changes_outside_the_resumable_keys(tmp_path):
    run_dir = tmp_path / "run"
    jaxrl_async.train(jaxrl_async.load_config("ppo_cartpole", SMALL), run_dir=run_dir)
    before = (run_dir / "metrics.jsonl").read_text()
    with pytest.raises(ConfigError, match=r"cannot change agent.learning_rate when resuming"):
        jaxrl_async.resume(run_dir, ["agent.learning_rate=0.1"])
    # A hand-edited config.yaml that changes the state's shapes is caught the same way.
    config_yaml = run_dir / "config.yaml"
    text = config_yaml.read_text()
    at = text.index("hidden_sizes:")
    config_yaml.write_text(text[:at] + text[at:].replace("- 16\n", "- 32\n", 1))
    with pytest.raises(ConfigError, match=r"cannot change agent.hidden_sizes") as info:
        jaxrl_async.resume(run_dir, ["train.total_steps=8192"])
    assert "\n" not in str(info.value)
    assert (run_dir / "metrics.jsonl").read_text() == before


@pytest.mark.slow
def test_periodic_checkpoints_round_to_host_calls_and_keep_the_last_n(tmp_path):
    run_dir = tmp_path / "run"
    # No LR annealing: the run and its extension are test_extending's one program.
    config = jaxrl_async.load_config(
        "ppo_cartpole", SMALL + ["checkpoint.every=1500", "agent.anneal_lr=false"]
    )
    jaxrl_async.train(config, run_dir=run_dir)
    # Host calls end every 1024 steps: the first boundaries past 1500 and 3000 are 2048 and
    # 3072, then the final 4096 (keep=3 holds all of them).
    assert ckpt.steps(run_dir / "checkpoints") == [2048, 3072, 4096]
    step, meta = ckpt.read_meta(run_dir / "checkpoints")
    assert step == 4096 and meta["env_steps"] == 4096 and meta["calls"] == 4
    assert meta["ticks"] == 8 and "every: 1500" in meta["config"]

    # Extended with keep=2: saves at 5120 and 6144 (past 4500 and 6000), 7168 is not past
    # 7500, then the final 8192; the oldest go.
    jaxrl_async.resume(run_dir, ["train.total_steps=8192", "checkpoint.keep=2"])
    assert ckpt.steps(run_dir / "checkpoints") == [6144, 8192]


CRASH_ON_SAVE = """
import os, sys
from orbax.checkpoint.path import atomicity
import jaxrl_async

finalize = atomicity.AtomicRenameTemporaryPath.finalize

async def crash_before_commit(self, *args, **kwargs):
    if "4096" in str(self.get()):  # everything written but the final rename
        os._exit(9)
    return await finalize(self, *args, **kwargs)

atomicity.AtomicRenameTemporaryPath.finalize = crash_before_commit
config = jaxrl_async.load_config("ppo_cartpole", sys.argv[2:])
jaxrl_async.train(config, run_dir=sys.argv[1])
"""


@pytest.mark.slow
def test_a_crash_mid_save_leaves_the_previous_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(CRASH_ON_SAVE),
            str(run_dir),
            *SMALL,
            "checkpoint.every=2048",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 9, proc.stderr[-2000:]
    leftovers = [p.name for p in (run_dir / "checkpoints").iterdir() if "tmp" in p.name]
    assert leftovers and leftovers[0].startswith("4096.")
    assert ckpt.steps(run_dir / "checkpoints") == [2048]
    assert [r["env_steps"] for r in records(run_dir)] == [1024, 2048, 3072, 4096]

    resumed = jaxrl_async.resume(run_dir)  # from 2048; the half-written 4096 is cleared
    assert not [p for p in (run_dir / "checkpoints").iterdir() if "tmp" in p.name]
    assert ckpt.steps(run_dir / "checkpoints") == [2048, 4096]
    assert [r["env_steps"] for r in records(run_dir)] == [1024, 2048, 3072, 4096]
    reference = jaxrl_async.train(jaxrl_async.load_config("ppo_cartpole", SMALL))
    assert_same_state(resumed.state, reference.state)


# ---------------------------------------------------------------------------------------------
# Bad checkpoints through the real CLI: exit 2, one line, nothing written


def _truncate(relative):
    def corrupt(checkpoint):
        path = checkpoint / relative
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    return corrupt


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    jaxrl_async.train(jaxrl_async.load_config("ppo_cartpole", SMALL), run_dir=run_dir)
    return run_dir


def _snapshot(path):
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


# In process (`cli.main`) for each damage, through the real command for one.
@pytest.mark.parametrize(
    "corrupt, mentions, command",
    [
        pytest.param(_truncate("meta/metadata"), "is unreadable", False, id="metadata"),
        pytest.param(_truncate("state/manifest.ocdbt"), "is unreadable", True, id="array-index"),
        pytest.param(_truncate("state/_METADATA"), "is unreadable", False, id="tree-metadata"),
        pytest.param(
            lambda checkpoint: (checkpoint / "meta" / "metadata").unlink(),
            "is unreadable",
            False,
            id="metadata-missing",
        ),
    ],
)
@pytest.mark.slow
def test_cli_resume_of_a_corrupt_checkpoint_exits_2(
    cli, tmp_path, finished_run, corrupt, mentions, command
):
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    corrupt(run_dir / "checkpoints" / "4096")
    before = _snapshot(run_dir)
    args = ("resume", str(run_dir), "total_steps=8192")
    if command:
        proc = cli(*args, cwd=tmp_path, timeout=300)
        code, stderr = proc.returncode, proc.stderr
    else:
        code, stderr = run_cli_in_process(*args, cwd=tmp_path)
    assert code == 2, stderr[-2000:]
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxrl-async: error: checkpoint "), lines
    assert mentions in lines[0]
    assert _snapshot(run_dir) == before


@pytest.mark.parametrize(
    "layout, mentions",
    [
        pytest.param("config-only", "no checkpoint in", id="no-checkpoints"),
        pytest.param("nothing", "not found", id="no-run-dir"),
    ],
)
def test_cli_resume_without_a_checkpoint_exits_2(tmp_path, layout, mentions):
    run_dir = tmp_path / "run"
    if layout == "config-only":
        run_dir.mkdir()
        (run_dir / "config.yaml").write_text(
            jaxrl_async.load_config("ppo_cartpole", SMALL).to_yaml()
        )
    code, stderr = run_cli_in_process("resume", str(run_dir), cwd=tmp_path)
    assert code == 2, stderr[-2000:]
    lines = stderr.splitlines()
    assert len(lines) == 1 and mentions in lines[0], lines
    assert "Traceback" not in stderr


@pytest.mark.slow
def test_cli_resume_tolerates_a_damaged_orbax_step_metadata_quietly(cli, tmp_path, finished_run):
    """Orbax ignores an unparsable _CHECKPOINT_METADATA (it is not needed to restore)
    but logs ERROR lines through absl; the resume must work and print none of them."""
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    _truncate("_CHECKPOINT_METADATA")(run_dir / "checkpoints" / "4096")
    proc = cli(
        "resume",
        str(run_dir),
        "total_steps=8192",
        "train.progress=false",
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.strip() == "", proc.stderr


@pytest.mark.slow
def test_cli_resume_with_a_changed_key_exits_2(tmp_path, finished_run):
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    before = _snapshot(run_dir)
    code, stderr = run_cli_in_process(
        "resume", str(run_dir), "agent.learning_rate=0.1", cwd=tmp_path
    )
    assert code == 2, stderr[-2000:]
    lines = stderr.splitlines()
    assert len(lines) == 1 and "agent.learning_rate" in lines[0], lines
    assert _snapshot(run_dir) == before


def test_a_resume_keeps_the_device_count_the_run_chose(tmp_path, monkeypatch):
    """`pipeline.devices=0` is chosen anew on each machine (a CPU is one device per core
    by default), but a checkpoint's layout is fixed: a resume pins the count the
    checkpoint records, and a checkpoint without one leaves the choice to the machine."""
    from jaxrl_async.pipeline.layout import Machine, choose_layout
    from jaxrl_async.run import rundir

    saved = jaxrl_async.load_config("dqn_cartpole").to_yaml()
    (tmp_path / "config.yaml").write_text(saved)
    monkeypatch.setattr(rundir.ckpt, "read_meta", lambda _: (12000, {"devices": 1}))
    config = rundir.resume_config(tmp_path)
    assert config.pipeline.devices == 1
    assert choose_layout(config, Machine("cpu", 2)).devices == 1
    rundir.check_changes(saved, config)  # the pinned count is not a change
    with pytest.raises(jaxrl_async.ConfigError, match=r"cannot change pipeline.devices"):
        rundir.check_changes(
            config.to_yaml(), rundir.resume_config(tmp_path, ["pipeline.devices=2"])
        )

    def no_checkpoint(_):
        raise rundir.ckpt.CheckpointError("no checkpoint")

    monkeypatch.setattr(rundir.ckpt, "read_meta", no_checkpoint)
    assert rundir.resume_config(tmp_path).pipeline.devices == 0


def test_a_resume_keeps_the_placement_the_run_chose(tmp_path, monkeypatch):
    """`pipeline.placement=auto` splits ppo_cartpole_async over two CPU devices; a resume
    on a machine where auto would choose otherwise (one device) keeps the checkpoint's
    split and its two devices, so it fails clearly there instead of continuing a fused
    run; a checkpoint without a recorded placement leaves the choice to the machine."""
    from jaxrl_async.pipeline.layout import Machine, choose_layout
    from jaxrl_async.run import rundir

    two, one = Machine("cpu", 2), Machine("cpu", 1)
    saved = jaxrl_async.load_config("ppo_cartpole_async").to_yaml()
    (tmp_path / "config.yaml").write_text(saved)
    monkeypatch.setattr(
        rundir.ckpt, "read_meta", lambda _: (12288, {"devices": 2, "placement": "split"})
    )
    config = rundir.resume_config(tmp_path)
    assert config.pipeline.placement == "split"
    assert choose_layout(config, two).placement == "split"
    rundir.check_changes(saved, config)  # the pinned choice is not a change
    with pytest.raises(jaxrl_async.ConfigError, match="only 1 local devices"):
        choose_layout(rundir.resume_config(tmp_path), one)
    monkeypatch.setattr(rundir.ckpt, "read_meta", lambda _: (12288, {"devices": 1}))
    config = rundir.resume_config(tmp_path)
    assert config.pipeline.placement == "auto"
    assert choose_layout(config, two).placement == "fused"
    # A placement the run's config set is the run's: a resume may not change it.
    fused = jaxrl_async.load_config("ppo_cartpole_async", ["pipeline.placement=fused"])
    with pytest.raises(jaxrl_async.ConfigError, match=r"cannot change pipeline.placement"):
        rundir.check_changes(fused.to_yaml(), config)
