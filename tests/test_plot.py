"""`jaxrl-async plot`: learning curves and SPS from run directories, to a PNG."""

import json

import numpy as np
import pytest

from jaxrl_async.cli import main
from jaxrl_async.plot import _band, load_run, plot_runs


def _write_run(path, name, returns, sps=1000.0):
    path.mkdir(parents=True)
    with open(path / "metrics.jsonl", "w") as f:
        for i, ret in enumerate(returns):
            f.write(json.dumps({"env_steps": 100 * (i + 1), "wall_seconds": 0.5 * (i + 1),
                                "episode_return": ret, "sps": sps}) + "\n")
    (path / "summary.json").write_text(json.dumps({"config": name}))
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
    runs = [_write_run(tmp_path / f"seed{i}", "demo", [float(v) for v in np.arange(30) * (i + 1)])
            for i in range(2)]
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
    with pytest.raises(Exception):
        plot_runs([tmp_path], tmp_path / "x.png")
