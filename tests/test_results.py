"""scripts/results.py end to end on a tiny budget, and every shipped config loading."""

import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

import jaxrl_async
from jaxrl_async.analysis import stats
from jaxrl_async.config.loader import available_configs

# A row's date as results.py writes it, fixed (the Unix epoch) so the test is the same any day.
EPOCH = datetime.fromtimestamp(0, UTC).strftime("%Y-%m-%d %H:%M UTC")

ROOT = Path(__file__).resolve().parents[1]

# The configs the results table promises (issue 7); the rest of the shipped ones load too.
EXPECTED = [
    "dqn_deepsea",
    "dqn_mountaincar",
    "ppo_acrobot",
    "ppo_asterix_minatar",
    "ppo_catch",
    "ppo_spaceinvaders_minatar",
]


def test_expected_configs_are_shipped():
    assert set(EXPECTED) <= set(available_configs())


@pytest.mark.parametrize("name", available_configs())
def test_every_shipped_config_loads(name):
    config = jaxrl_async.load_config(name)
    assert config.name == name
    assert config.num_updates >= 1


@pytest.mark.slow  # a fresh process (or several) that compiles and trains
def test_results_script_writes_table_curves_and_merges_rows(tmp_path):
    out, runs = tmp_path / "docs", tmp_path / "runs"
    out.mkdir()
    # A row from an earlier run of another config: a subset run keeps it.
    earlier = {
        "config": "zz_earlier",
        "env": "E",
        "agent": "ppo",
        "budget": 1000,
        "overrides": [],
        "seeds": [0],
        "final_return": [1.5],
        "sps": [10.0],
        "compile_seconds": [1.0],
        "wall_seconds": [2.0],
        "png": "results_zz.png",
        "date": EPOCH,
        "command": "python scripts/results.py",
        "machine": "M (1 cores)",
        "versions": {"jax": "0"},
    }
    (out / "results.json").write_text(json.dumps({"rows": {"zz_earlier": earlier}}))
    args = [
        "--configs",
        "ppo_cartpole",
        "--seeds",
        "2",
        "--out",
        str(out),
        "--runs",
        str(runs),
        "--override",
        "train.total_steps=2048",
        "--override",
        "train.log_every=512",
        "--override",
        "eval.every=2048",
        "--override",
        "eval.episodes=2",
        "--override",
        "train.compile_cache=true",
    ]  # the suite's shared compile cache
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "results.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]

    table = (out / "RESULTS.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| `ppo_cartpole`"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:5] == ["CartPole-v1", "ppo", "2,048", "2"]
    assert "±" in cells[5] and "±" in cells[7]  # final (training) and eval return
    # The IQM column: `jaxrl-async report`'s statistics of the seeds' final returns.
    finals = json.loads((out / "results.json").read_text())["rows"]["ppo_cartpole"]["final_return"]
    iqm, (low, high) = stats.interval([finals], stats.iqm)
    shown = re.findall(r"-?\d+\.?\d*", cells[6])
    # Each shown to the table's precision: within half a unit of its last digit.
    for text, value in zip(shown, [iqm, low, high], strict=True):
        digits = len(text.split(".")[1]) if "." in text else 0
        assert abs(float(text) - value) <= 0.5 * 10**-digits + 1e-9, (text, value)
    assert "| `zz_earlier` |" in table  # merged, not replaced
    assert "python scripts/results.py --configs ppo_cartpole --seeds 2 --override" in table
    # --out and --runs were scratch directories of this machine: the page leaves them out.
    assert str(tmp_path) not in table and "--out" not in table and "--runs" not in table
    assert "![ppo_cartpole](results_ppo_cartpole.png)" in table
    assert "Random play (dashed): 22.4, reference table." in table
    png = out / "results_ppo_cartpole.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000

    rows = json.loads((out / "results.json").read_text())["rows"]
    assert set(rows) == {"ppo_cartpole", "zz_earlier"}
    assert rows["ppo_cartpole"]["seeds"] == [0, 1]
    assert len(rows["ppo_cartpole"]["sps"]) == len(rows["ppo_cartpole"]["eval_return"]) == 2
    for seed in (0, 1):
        run_dir = runs / "ppo_cartpole" / f"seed{seed}"
        assert (run_dir / "metrics.jsonl").read_text().count("\n") == 4
        assert json.loads((run_dir / "summary.json").read_text())["seed"] == seed


def test_random_play_is_measured_on_a_host_env_and_read_from_the_table_otherwise():
    import importlib.util

    spec = importlib.util.spec_from_file_location("results_script", ROOT / "scripts/results.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    pytest.importorskip("gymnasium")
    config = jaxrl_async.load_config("ppo_gymnasium_cartpole", ["env.num_envs=8"])
    measured = script.random_play(config, 80)
    assert measured["episodes"] == 80 and measured["se"] > 0
    assert abs(measured["mean"] - 22.4) < 5 * measured["se"]
    assert script.random_play(jaxrl_async.load_config("ppo_cartpole"), 80) == {
        "mean": 22.4,
        "se": None,
        "episodes": None,
    }
    assert script.random_play(jaxrl_async.load_config("ppo_breakout_minatar"), 80) is None
    # Under the config's curves: the measured mean with its standard error
    row = {
        "config": "c",
        "env": "gymnasium:CartPole-v1",
        "agent": "ppo",
        "budget": 10,
        "overrides": [],
        "seeds": [0],
        "final_return": [30.0],
        "eval_return": [],
        "sps": [1.0],
        "compile_seconds": [1.0],
        "wall_seconds": [1.0],
        "png": "results_c.png",
        "random_play": measured,
        "error": None,
        "date": EPOCH,
        "command": "python scripts/results.py",
        "machine": "M (1 cores)",
        "versions": {"jax": "0"},
    }
    shown = f"Random play (dashed): {measured['mean']:.2f} ± {measured['se']:.2f}"
    assert shown in script.render({"c": row})


def test_results_script_rejects_bad_input_before_training(tmp_path):
    script = str(ROOT / "scripts" / "results.py")
    for args in (["--configs", "no_such_config"], ["--override", "train.nope=1"]):
        done = subprocess.run(
            [sys.executable, script, "--out", str(tmp_path / "docs"), *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert done.returncode == 2, done.stderr
    assert not (tmp_path / "docs").exists()


def test_a_failed_config_is_a_row_that_says_why():
    import importlib.util

    spec = importlib.util.spec_from_file_location("results", ROOT / "scripts" / "results.py")
    results = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(results)
    batch = {"date": "d", "command": "c", "machine": "m", "versions": {"jax": "0"}}
    ok = {
        "config": "a",
        "env": "E",
        "agent": "ppo",
        "budget": 10,
        "overrides": [],
        "seeds": [0, 1],
        "final_return": [1.0, None],
        "sps": [5.0, 7.0],
        "compile_seconds": [1.0, 2.0],
        "wall_seconds": [3.0, 4.0],
        "png": "results_a.png",
        "error": None,
        **batch,
    }
    failed = {
        **ok,
        "config": "b",
        "seeds": [],
        "final_return": [],
        "sps": [],
        "compile_seconds": [],
        "wall_seconds": [],
        "png": None,
        "error": "seed 0: TypeError: a | b",
    }
    table = results.render({"a": ok, "b": failed})
    assert (
        "| `a` | E | ppo | 10 | 2 | 1.00 ± 0.00 (1 of 2 seeds) | 1.00 [1.00, 1.00] | - | 6 | 1.5 "
        "| 4 |" in table
    )
    assert (
        "| `b` | E | ppo | 10 | 0 | **failed** (seed 0: TypeError: a / b); - | - | - | - | - | - |"
        in table
    )
    assert "results_a.png" in table and "### b" not in table
