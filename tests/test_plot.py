"""`jaxrl-async plot`: learning curves and SPS from run or sweep directories, to a PNG."""

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from jaxrl_async.analysis.plot import (
    _band,
    _short_keys,
    group_runs,
    load_run,
    load_sweep,
    plot_runs,
    single_key_panel,
    sweep_bands,
)
from jaxrl_async.cli import main


def _write_run(path, name, returns, sps=1000.0, seeds=None, config=None):
    """A run directory; `seeds` ([S, T]) adds episode_return/seed<k> columns, `config`
    ({"section.key": value} over the defaults below) a config.yaml."""
    path.mkdir(parents=True)
    with open(path / "metrics.jsonl", "w") as f:
        for i, ret in enumerate(returns):
            record = {
                "env_steps": 100 * (i + 1),
                "wall_seconds": 0.5 * (i + 1),
                "episode_return": ret,
                "sps": sps,
            }
            for k, seed_returns in enumerate(seeds if seeds is not None else []):
                record[f"episode_return/seed{k}"] = seed_returns[i]
            f.write(json.dumps(record) + "\n")
    (path / "summary.json").write_text(json.dumps({"config": name}))
    if config is not None:
        tree = {
            "name": name,
            "agent": {"name": "ppo", "learning_rate": 0.00025, "hidden_sizes": [64, 64]},
            "pipeline": {"devices": 0},
            "checkpoint": {"every": 0},
            "train": {"seed": 0, "total_steps": 1000, "progress": True},
        }
        for key, value in config.items():
            section, name_ = key.split(".")
            tree[section][name_] = value
        (path / "config.yaml").write_text(yaml.safe_dump(tree))
    return path


def test_seeds_are_drawn_as_mean_and_band(tmp_path):
    a = _write_run(tmp_path / "a", "demo", [1.0, 2.0, 3.0])
    b = _write_run(tmp_path / "b", "demo", [3.0, None, 5.0, 9.0])  # None: no episode ended
    runs = [load_run(a), load_run(b)]
    x, mean, low, high = _band(runs, "env_steps", "episode_return")
    np.testing.assert_array_equal(x, [100, 200, 300])  # the shortest run's grid
    np.testing.assert_allclose(mean, [2.0, 2.5, 4.0])  # b's gap repeats its last value
    np.testing.assert_allclose(low, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(high, [3.0, 3.0, 5.0])


def test_cli_plot_writes_a_png(tmp_path, capsys):
    runs = [
        _write_run(tmp_path / f"seed{i}", "demo", [float(v) for v in np.arange(30) * (i + 1)])
        for i in range(2)
    ]
    other = _write_run(tmp_path / "other", "other", [5.0] * 10)
    out = tmp_path / "plots" / "curves.png"
    assert main(["plot", *map(str, runs), str(other), "--out", str(out)]) == 0
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 10_000
    assert main(["plot", str(runs[0])]) == 0  # default: inside the run directory
    assert (runs[0] / "curves.png").stat().st_size > 10_000


def test_plot_of_a_directory_without_metrics_is_exit_2(tmp_path, capsys):
    assert main(["plot", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no metrics.jsonl" in err[0]
    with pytest.raises(Exception):  # noqa: B017
        plot_runs([tmp_path], tmp_path / "x.png")


def _groups(*run_dirs):
    return [
        (label, [r["config"]["train.seed"] for r in runs])
        for label, runs in group_runs([load_run(d) for d in run_dirs])
    ]


def test_runs_differing_in_seed_alone_are_one_group(tmp_path):
    runs = [
        _write_run(
            tmp_path / f"s{seed}",
            "demo",
            [1.0, 2.0],
            config={
                "train.seed": seed,
                "train.progress": seed == 0,
                "checkpoint.every": 100 * seed,
            },
        )
        for seed in range(3)
    ]
    assert _groups(*runs) == [("demo", [0, 1, 2])]


def test_runs_with_other_differences_are_labelled_by_them(tmp_path):
    base = _write_run(tmp_path / "base", "demo", [1.0], config={})
    seed = _write_run(tmp_path / "seed", "demo", [1.0], config={"train.seed": 1})
    lr = _write_run(tmp_path / "lr", "demo", [1.0], config={"agent.learning_rate": 0.001})
    steps = _write_run(tmp_path / "steps", "demo", [1.0], config={"train.total_steps": 2000})
    other = _write_run(tmp_path / "other", "other", [1.0], config={"agent.learning_rate": 0.1})
    bare = _write_run(tmp_path / "bare", "other", [1.0])  # no config.yaml: its name
    assert _groups(base, seed, lr, steps, other) == [
        ("demo (agent.learning_rate=0.00025, train.total_steps=1000)", [0, 1]),
        ("demo (agent.learning_rate=0.001, train.total_steps=1000)", [0]),
        ("demo (agent.learning_rate=0.00025, train.total_steps=2000)", [0]),
        ("other", [0]),
    ]
    assert [label for label, _ in group_runs([load_run(lr), load_run(base)])] == [
        "demo (agent.learning_rate=0.001)",
        "demo (agent.learning_rate=0.00025)",
    ]
    assert [label for label, _ in group_runs([load_run(other), load_run(bare)])] == [
        "other",
        "other (no config.yaml)",
    ]
    assert plot_runs([base, seed, lr, steps, other, bare], tmp_path / "c.png").stat().st_size


def test_a_run_of_several_seeds_is_a_band_over_its_seeds(tmp_path):
    seeds = np.array([[1.0, 2.0, 3.0], [3.0, 6.0, 1.0], [2.0, 1.0, 8.0]])
    run = load_run(_write_run(tmp_path / "r", "demo", list(seeds.mean(0)), seeds=seeds))
    _x, mean, low, high = _band([run], "env_steps", "episode_return")
    np.testing.assert_allclose(mean, seeds.mean(0))
    np.testing.assert_allclose(low, seeds.min(0))
    np.testing.assert_allclose(high, seeds.max(0))
    _, mean, low, high = _band([run], "env_steps", "episode_return", spread="std")
    np.testing.assert_allclose(high - mean, seeds.std(0))


def _write_sweep(path, values, key="agent.learning_rate", seeds=3, extra=None, best=0):
    """A sweep directory over `values` of `key` (plus `extra` overrides in every point); the
    point i's seed k returns (i + 1) * (k + 1) * t at log point t. Returns the seed arrays."""
    points, all_seeds = [], []
    for i, value in enumerate(values):
        overrides = {key: value, **(extra or {})}
        run_dir = f"{i:03d}_" + "_".join(f"{k}={v}" for k, v in overrides.items())
        curves = np.array(
            [[(i + 1) * (k + 1) * t for t in range(1, 6)] for k in range(seeds)], dtype=float
        )
        _write_run(path / run_dir, "demo", list(curves.mean(0)), seeds=curves)
        points.append(
            {
                "overrides": overrides,
                "final_return_mean": curves[:, -1].mean(),
                "final_return_std": curves[:, -1].std(),
                "final_return_seeds": list(curves[:, -1]),
                "auc": 1.0,
                "run_dir": run_dir,
            }
        )
        all_seeds.append(curves)
    (path / "sweep.json").write_text(json.dumps({"points": points, "best": best}))
    return all_seeds


def test_a_sweep_is_one_band_per_point_over_its_seeds(tmp_path):
    seeds = _write_sweep(tmp_path, [0.003, 0.0003], extra={"agent.ent_coef": 0.01}, best=1)
    bands = sweep_bands(load_sweep(tmp_path))
    assert [b["label"] for b in bands] == [
        "learning_rate=0.003, ent_coef=0.01",
        "learning_rate=0.0003, ent_coef=0.01",
    ]
    for band, curves in zip(bands, seeds):
        np.testing.assert_array_equal(band["env_steps"], [100, 200, 300, 400, 500])
        np.testing.assert_allclose(band["mean"], curves.mean(0))
        np.testing.assert_allclose(band["std"], curves.std(0))
        assert band["final_return"] == pytest.approx(curves[:, -1].mean())
    # ent_coef is the same everywhere: the sweep varies one key, drawn in value order.
    panel = single_key_panel(load_sweep(tmp_path))
    assert panel["key"] == "agent.learning_rate" and panel["order"] == [1, 0]
    np.testing.assert_allclose(panel["x"], [0.0003, 0.003])
    np.testing.assert_allclose(panel["mean"], [seeds[1][:, -1].mean(), seeds[0][:, -1].mean()])
    np.testing.assert_allclose(panel["std"], [seeds[1][:, -1].std(), seeds[0][:, -1].std()])
    assert panel["ticks"] is None and not panel["log"]  # a 10x span only: linear


def test_the_final_return_panel_axis(tmp_path):
    _write_sweep(tmp_path / "log", [1e-2, 1e-4, 1e-3], seeds=1)
    panel = single_key_panel(load_sweep(tmp_path / "log"))
    np.testing.assert_allclose(panel["x"], [1e-4, 1e-3, 1e-2])
    assert panel["log"] and panel["order"] == [1, 2, 0]
    _write_sweep(tmp_path / "zero", [0.0, 0.1, 10.0], key="agent.ent_coef", seeds=1)
    assert not single_key_panel(load_sweep(tmp_path / "zero"))["log"]
    _write_sweep(tmp_path / "names", ["relu", "tanh"], key="agent.activation", seeds=1)
    panel = single_key_panel(load_sweep(tmp_path / "names"))
    assert panel["ticks"] == ["relu", "tanh"] and list(panel["x"]) == [0, 1]


def test_a_sweep_of_two_keys_has_no_single_key_panel(tmp_path):
    _write_sweep(tmp_path / "a", [1, 2], key="agent.batch_size", seeds=1)
    sweep = load_sweep(tmp_path / "a")
    sweep["points"][1]["overrides"]["replay.batch_size"] = 7
    assert single_key_panel(sweep) is None
    assert _short_keys(["agent.batch_size", "replay.batch_size", "train.seed"]) == {
        "agent.batch_size": "agent.batch_size",
        "replay.batch_size": "replay.batch_size",
        "train.seed": "seed",
    }


def test_cli_plots_a_sweep_directory(tmp_path, capsys):
    _write_sweep(tmp_path / "small", [1e-4, 1e-3, 1e-2])
    assert main(["plot", str(tmp_path / "small")]) == 0  # default: SWEEP_DIR/sweep.png
    assert (tmp_path / "small" / "sweep.png").read_bytes().startswith(b"\x89PNG")
    # 20 points: coloured by final return instead of a legend of 20 labels.
    _write_sweep(tmp_path / "big", list(np.geomspace(1e-5, 1e-2, 20)), seeds=2, best=19)
    out = tmp_path / "big.png"
    assert main(["plot", str(tmp_path / "big"), "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000
    assert main(["plot", str(tmp_path / "small"), str(tmp_path / "big")]) == 2


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: "{not json", "cannot read"),
        (lambda s: json.dumps({"points": []}), "no list of points"),
        (lambda s: json.dumps({"points": [{"overrides": {}}]}), "needs overrides"),
        (lambda s: json.dumps({**s, "best": 5}), "best=5"),
        (
            lambda s: json.dumps({"points": [{**s["points"][0], "run_dir": "gone"}]}),
            "which is missing",
        ),
    ],
)
def test_a_malformed_sweep_is_exit_2(tmp_path, capsys, change, message):
    _write_sweep(tmp_path, [1e-3], seeds=1)
    path = tmp_path / "sweep.json"
    path.write_text(change(json.loads(path.read_text())))
    assert main(["plot", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_baselines_are_lines_on_the_return_panels_only(tmp_path, monkeypatch):
    from jaxrl_async.analysis import plot

    figures = []
    monkeypatch.setattr(plot, "_save", lambda fig, out: figures.append(fig) or Path(out))
    run = _write_run(tmp_path / "run", "demo", [1.0, 2.0])
    plot_runs([run], tmp_path / "c.png", baselines={"random play": 1.5})
    returns_steps, returns_wall, sps = figures[0].axes
    for ax in (returns_steps, returns_wall):
        (line,) = [line for line in ax.get_lines() if line.get_label() == "random play"]
        assert set(line.get_ydata()) == {1.5}
    assert not [line for line in sps.get_lines() if line.get_label() == "random play"]
