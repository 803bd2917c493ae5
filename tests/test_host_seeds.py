"""Several seeds of a host-env run side by side (`train.num_seeds`, `host/seeds.py`): run k
is the one-seed run of train.seed + k (its envs, actor keys and learner), its learner a
slice of one vmapped program; so are a sweep's points on a host env. Checkpoints hold
every run's state and a resume continues from them.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxrl_async import load_config, sweep, train
from jaxrl_async.run import checkpoint as ckpt
from tests.helpers import host_envs  # noqa: F401  (registers the corridor envs)
from tests.helpers.cli import run_cli_in_process
from tests.helpers.host_runs import CORRIDOR, SMALL, dqn_config, record_executors

# Float rounding of a batched program against the one-seed program.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


def ppo(*overrides: str, rounds: int = 6):
    return load_config(
        "ppo_cartpole",
        [
            f"env.name={CORRIDOR}",
            *SMALL,
            "pipeline.actor_threads=2",
            f"train.total_steps={16 * rounds}",
            *overrides,
        ],
    )


def seed_slice(tree, k: int):
    return jax.tree.map(lambda x: np.asarray(x)[k], tree)


def assert_close(a, b) -> None:
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), **TOLERANCE)


@pytest.mark.parametrize(
    "make",
    [
        lambda *o: ppo("pipeline.lag=1", *o),
        lambda *o: ppo("env.normalize_obs=true", *o),
        lambda *o: dqn_config(*o, rounds=6),
    ],
    ids=["ppo-lag1", "ppo-normalized", "dqn-prioritized"],
)
def test_each_seed_is_the_one_seed_run_of_its_seed(make):
    """Two seeds side by side: seed k's parameters and episode returns are those of the
    run of train.seed = 3 + k alone, to float rounding, and the two differ."""
    both = train(make("train.seed=3", "train.num_seeds=2"))
    alone = [train(make(f"train.seed={3 + k}")) for k in range(2)]
    assert both.summary["num_seeds"] == 2
    for k, run in enumerate(alone):
        assert_close(seed_slice(both.state.params, k), run.state.params)
        np.testing.assert_allclose(
            both.metrics[f"episode_return/seed{k}"], run.metrics["episode_return"], **TOLERANCE
        )
    first = jax.tree.leaves(seed_slice(both.state.params, 0))
    second = jax.tree.leaves(seed_slice(both.state.params, 1))
    assert any(not np.allclose(a, b) for a, b in zip(first, second))


def test_a_seed_batched_run_checkpoints_and_resumes_every_seed(tmp_path, monkeypatch):
    """The checkpoint holds both runs' learner states and observation statistics; the
    resumed executor starts from exactly them, and the run ends with both seeds'
    records to its last step."""
    calls = record_executors(monkeypatch)
    run = tmp_path / "run"
    extra = ["train.num_seeds=2", "env.normalize_obs=true", "checkpoint.every=32"]
    first = train(ppo(*extra, rounds=4), run_dir=run)
    assert ckpt.steps(run / "checkpoints")[-1] == 64
    resumed = train(ppo(*extra, rounds=6), run_dir=run, resume=True)
    start, last = calls[1]["start"], calls[0]["last"]
    assert (start.round, start.updates) == (4, last.updates)
    assert_close((start.state, start.obs_stats), (last.state, last.obs_stats))
    assert np.asarray(start.obs_stats.n).shape == (2,)
    assert [int(s) for s in resumed.metrics["env_steps"]] == [32, 64, 96]
    assert np.isfinite(resumed.metrics["episode_return/seed1"]).all()
    assert first.summary["num_seeds"] == resumed.summary["num_seeds"] == 2


def test_a_sweep_on_a_host_env_trains_its_points_as_seeds(tmp_path):
    """Two learning rates x one seed on the corridor: each point's parameters are those
    of the one-seed run at its learning rate, to float rounding."""
    rates = [3e-4, 1e-2]
    result = sweep(ppo(), {"agent.learning_rate": rates}, sweep_dir=tmp_path / "sweep")
    assert len(result.points) == 2
    for k, rate in enumerate(rates):
        alone = train(ppo(f"agent.learning_rate={rate}"))
        assert_close(seed_slice(result.states[0].params, k), alone.state.params)
        assert (tmp_path / "sweep").exists()


@pytest.mark.parametrize("lag", [0, 1])
def test_a_seed_batched_run_repeats_at_any_thread_count(lag):
    """Two seeds at lag 0 and 1: one actor thread a seed or two give the same run, bit for
    bit (nothing depends on timing)."""
    runs = [
        train(ppo("train.num_seeds=2", f"pipeline.lag={lag}", f"pipeline.actor_threads={n}"))
        for n in (1, 2)
    ]
    for a, b in zip(jax.tree.leaves(runs[0].state), jax.tree.leaves(runs[1].state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(runs[0].metrics["loss"], runs[1].metrics["loss"])


def test_eval_of_a_seed_batched_run_is_refused_in_one_line(tmp_path):
    """Its checkpoint holds every seed's state; eval restores one seed's: exit 2, one line
    saying so, no eval.json."""
    run = tmp_path / "run"
    train(ppo("train.num_seeds=2", rounds=2), run_dir=run)
    code, err = run_cli_in_process("eval", str(run), cwd=tmp_path)
    assert code == 2 and err.count("\n") == 1, err
    assert "trained 2 seeds side by side" in err and not (run / "eval.json").exists()
