"""Sweeps (`jaxrl_async.sweep`, `jaxrl-async sweep`): a grid of hyperparameters x seeds as
one program per structural group, its table, its files, its resume."""

import json
import math

import jax
import numpy as np
import pytest

import jaxrl_async
from jaxrl_async.cli import main
from jaxrl_async.run import checkpoint as ckpt
from jaxrl_async.training.sweeps import auc, split_overrides
from tests.helpers.configs import PPO_SWEEP_TINY, SWEEP_GRID
from tests.helpers.resume import assert_same_records, assert_same_state, interrupt_at, records

TINY, GRID = PPO_SWEEP_TINY, SWEEP_GRID


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The 2 x 2 grid x 2 seeds of TINY, trained once for the module."""
    sweep_dir = tmp_path_factory.mktemp("sweep") / "s"
    config = jaxrl_async.load_config("ppo_cartpole", TINY)
    return config, jaxrl_async.sweep(config, GRID, sweep_dir=sweep_dir)


@pytest.mark.slow
def test_a_grid_point_equals_the_single_run_with_its_values(swept):
    _config, result = swept
    point = 3  # learning_rate 0.003, ent_coef 0.01
    assert result.points[point]["overrides"] == {
        "agent.learning_rate": 0.003,
        "agent.ent_coef": 0.01,
    }
    single = jaxrl_async.train(
        jaxrl_async.load_config(
            "ppo_cartpole", TINY + ["agent.learning_rate=0.003", "agent.ent_coef=0.01"]
        )
    )
    mine = result.metrics(point)
    assert mine.keys() >= {"loss", "episode_return/seed0", "episode_return/seed1"}
    # The seeds' keys are the single run's; only vmapped float rounding differs.
    for key in ("loss", "entropy", "value_loss", "episode_return/seed0", "episode_return/seed1"):
        np.testing.assert_allclose(
            mine[key][:2], single.metrics[key][:2], rtol=1e-4, atol=1e-5, err_msg=key
        )


@pytest.mark.slow
def test_a_zero_learning_rate_leaves_the_parameters_and_a_large_one_moves_them(swept):
    from jaxrl_async.pipeline.build import build_pipeline
    from jaxrl_async.pipeline.program import seed_keys

    config, result = swept
    (state,) = result.states
    pipeline, _ = build_pipeline(config)
    start = jax.jit(jax.vmap(pipeline.init))(seed_keys(0, 2, config.prng_impl))
    seeds = config.train.num_seeds
    for point, rate in enumerate(p["overrides"]["agent.learning_rate"] for p in result.points):
        for k in range(seeds):
            run = point * seeds + k
            moved = max(
                float(np.max(np.abs(np.asarray(a[run]) - np.asarray(b[k]))))
                for a, b in zip(
                    jax.tree.leaves(state.learner.params), jax.tree.leaves(start.learner.params)
                )
            )
            assert (moved < 1e-6) if rate == 0 else (moved > 1e-3), (point, k, moved)
    # Each run holds its own values; the rest keep the config's.
    hparams = state.learner.hparams
    np.testing.assert_allclose(hparams["learning_rate"], np.repeat([0, 0, 3e-3, 3e-3], 2))
    np.testing.assert_allclose(hparams["ent_coef"], np.repeat([0, 0.01, 0, 0.01], 2))
    np.testing.assert_allclose(hparams["clip_eps"], config.agent.clip_eps)


@pytest.mark.slow
def test_the_table_and_the_point_files_agree_with_numpy(swept):
    _config, result = swept
    sweep_dir = result.sweep_dir
    table = json.loads((sweep_dir / "sweep.json").read_text())
    assert table["points"] == json.loads(json.dumps(result.points))
    assert len(table["points"]) == 4
    for row in table["points"]:
        run_dir = sweep_dir / row["run_dir"]
        rows = records(run_dir)
        finals = []
        for k in range(2):
            values = [
                r[f"episode_return/seed{k}"]
                for r in rows
                if r[f"episode_return/seed{k}"] is not None
            ]
            finals.append(values[-1])
        assert row["final_return_seeds"] == pytest.approx(finals)
        assert row["final_return_mean"] == pytest.approx(np.mean(finals))
        assert row["final_return_std"] == pytest.approx(np.std(finals))
        assert row["auc"] == pytest.approx(auc(rows))
        point_config = jaxrl_async.load_config(run_dir / "config.yaml")
        assert point_config.train.num_seeds == 2
        for key, value in row["overrides"].items():
            assert getattr(point_config.agent, key.split(".")[1]) == value
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["final_return_seeds"] == pytest.approx(finals)
        assert summary["overrides"] == row["overrides"]
    means = [r["final_return_mean"] for r in table["points"]]
    assert table["best"] == int(np.argmax(means))


def test_auc_is_the_mean_of_the_curve_over_env_steps():
    records = [
        {"env_steps": 100, "episode_return": 10.0},
        {"env_steps": 200, "episode_return": math.nan},
        {"env_steps": 300, "episode_return": 30.0},
        {"env_steps": 400, "episode_return": 30.0},
    ]
    assert auc(records) == pytest.approx((20 * 200 + 30 * 100) / 300)


@pytest.mark.slow
def test_a_resumed_sweep_equals_the_uninterrupted_one(swept, tmp_path):
    config, reference = swept
    sweep_dir = tmp_path / "s"

    with pytest.raises(jaxrl_async.TrainingInterrupted) as info:
        jaxrl_async.sweep(config, GRID, sweep_dir=sweep_dir, callbacks=[interrupt_at(128)])
    assert info.value.run_dir == sweep_dir
    assert ckpt.steps(sweep_dir / "groups" / "0" / "checkpoints") == [256]
    assert not (sweep_dir / "sweep.json").exists()

    resumed = jaxrl_async.resume_sweep(sweep_dir)
    assert_same_state(resumed.states[0], reference.states[0])
    for row in reference.points:
        assert_same_records(
            records(sweep_dir / row["run_dir"]), records(reference.sweep_dir / row["run_dir"])
        )
    strip = lambda rows: [{k: v for k, v in r.items() if k != "run_dir"} for r in rows]  # noqa: E731
    assert strip(resumed.points) == strip(reference.points)


def test_grid_words_split_from_plain_overrides():
    load = lambda o: jaxrl_async.load_config("ppo_cartpole", o)  # noqa: E731
    plain, grid = split_overrides(
        [
            "agent.learning_rate=[1e-4,3e-4]",
            "agent.hidden_sizes=[32,32]",
            "agent.ent_coef=0.0",
            "env.num_envs=[4,8]",
        ],
        load,
    )
    assert plain == ["agent.ent_coef=0.0", "agent.hidden_sizes=[32, 32]"]
    assert grid == {"agent.learning_rate": [1e-4, 3e-4], "env.num_envs": [4, 8]}
    plain, grid = split_overrides(["agent.hidden_sizes=[[8],[16,16]]"], load)
    assert plain == [] and grid == {"agent.hidden_sizes": [[8], [16, 16]]}


@pytest.mark.parametrize(
    "words, mentions",
    [
        (["agent.learning_rate=[0.001,-1]"], "agent.learning_rate must be >= 0"),
        (["train.progress=[true,false]"], "train.progress is not sweepable"),
        (["agent.name=[ppo,dqn]"], "agent.name is not sweepable"),
        (["agent.foo=[1,2]"], "agent.foo"),
        (["agent.learning_rate=[1e-3,abc]"], "agent.learning_rate"),
        ([], "needs at least one key"),
        (["agent.ent_coef=[0,0.01]", "eval.every=100"], "eval.every=0"),
    ],
)
def test_bad_sweeps_exit_2_before_anything_is_written(tmp_path, capsys, words, mentions):
    sweep_dir = tmp_path / "s"
    assert main(["sweep", "ppo_cartpole", *words, "--sweep-dir", str(sweep_dir)]) == 2
    err = capsys.readouterr().err
    assert mentions in err and len(err.strip().splitlines()) == 1, err
    assert not sweep_dir.exists()


@pytest.mark.slow
def test_cli_sweep_of_structural_and_numeric_values_off_policy(tmp_path, capsys):
    """DQN, two network sizes (two programs) x two learning rates (one program each)."""
    sweep_dir = tmp_path / "s"
    assert (
        main(
            [
                "sweep",
                "dqn_cartpole",
                "agent.hidden_sizes=[[8],[16]]",
                "agent.learning_rate=[0,0.001]",
                "env.num_envs=4",
                "pipeline.rollout_len=4",
                "replay.capacity=256",
                "replay.batch_size=16",
                "replay.learning_starts=64",
                "train.total_steps=256",
                "train.log_every=128",
                "train.progress=false",
                "--sweep-dir",
                str(sweep_dir),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "<- best" in out and str(sweep_dir / "sweep.png") in out
    table = json.loads((sweep_dir / "sweep.json").read_text())
    assert [p["overrides"] for p in table["points"]] == [
        {"agent.hidden_sizes": [8], "agent.learning_rate": 0},
        {"agent.hidden_sizes": [8], "agent.learning_rate": 0.001},
        {"agent.hidden_sizes": [16], "agent.learning_rate": 0},
        {"agent.hidden_sizes": [16], "agent.learning_rate": 0.001},
    ]
    assert sorted(p.name for p in (sweep_dir / "groups").iterdir()) == ["0", "1"]
    for row in table["points"]:
        summary = json.loads((sweep_dir / row["run_dir"] / "summary.json").read_text())
        assert summary["agent"] == "dqn" and summary["num_seeds"] == 1
        assert len(records(sweep_dir / row["run_dir"])) == 2
    assert (sweep_dir / "sweep.png").stat().st_size > 0
