"""scripts/compare_wall.py on hand-written run directories: returns at equal wall time and steps."""

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "compare_wall.py"
spec = importlib.util.spec_from_file_location("compare_wall", SCRIPT)
compare_wall = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_wall)


def fake_run(path: Path, config: str, setup: float, records: list[tuple]) -> Path:
    """A run directory whose records are (training seconds, env steps, return)."""
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"env_steps": s, "wall_seconds": t, "episode_return": r}) + "\n"
            for t, s, r in records
        )
    )
    train = records[-1][0]
    (path / "summary.json").write_text(
        json.dumps({"config": config, "wall_seconds": setup + train, "train_seconds": train})
    )
    return path


def test_returns_at_equal_wall_time_and_equal_steps(tmp_path):
    # fast: 100 steps per second after 10 s of set-up; slow: 25 per second after 5 s
    fast = [
        fake_run(
            tmp_path / f"fast{k}", "fast", 10.0, [(t, 100 * t, t + k) for t in (10, 20, 30, 40)]
        )
        for k in range(2)
    ]
    slow = [
        fake_run(tmp_path / f"slow{k}", "slow", 5.0, [(t, 25 * t, 2 * t + k) for t in (10, 20, 30)])
        for k in range(3)
    ]
    groups = {}
    for d in fast + slow:
        run = compare_wall.load(d)
        groups.setdefault(run["config"], []).append(run)
    rows, seconds, steps = compare_wall.compare(groups, None, None)
    # W: the shorter group's median end (slow: 5 + 30 s); S: the fewest final steps (750)
    assert seconds == 35.0 and steps == 750
    by = {r["config"]: r for r in rows}
    # fast at 35 s: its record at 10 + 20 s (2,000 steps); slow at 35 s: its last record
    assert by["fast"]["return_at_seconds"] == [20, 21]
    assert by["fast"]["steps_at_seconds"] == [2000, 2000]
    assert by["slow"]["return_at_seconds"] == [60, 61, 62]
    # at 750 steps: fast has no record at or before it (its first is at 1,000), slow its last
    assert all(math.isnan(v) for v in by["fast"]["return_at_steps"])
    assert by["slow"]["return_at_steps"] == [60, 61, 62]
    table = compare_wall.format_table(rows, seconds, steps)
    assert "| `slow` | 3 | 61 ± 1 | 750 | 61 ± 1 | 35 |" in table
    assert "| `fast` | 2 | 20.5 ± 0.71 | 2,000 | - | 50 |" in table


def test_cli_table_png_and_a_bad_directory(tmp_path):
    runs = [
        fake_run(tmp_path / f"a{k}", "a", 1.0, [(1, 10, 1.0 + k), (2, 20, 2.0 + k)])
        for k in range(2)
    ]
    runs.append(fake_run(tmp_path / "b0", "b", 1.0, [(1, 5, 3.0), (4, 20, 4.0)]))
    png = tmp_path / "wall.png"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, runs), "--seconds", "2", "--png", str(png)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "| `a` | 2 | 1.5 ± 0.71 | 10 |" in done.stdout
    assert "| `b` | 1 | 3 | 5 |" in done.stdout
    assert png.stat().st_size > 1000
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "missing")], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "not a finished run directory" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize(
    "values,text",
    [
        ([1.0, math.nan], "1 (1 of 2)"),
        ([2.0], "2"),
        ([math.nan], "-"),
        ([1.0, 3.0, math.nan], "2 ± 1.4 (2 of 3)"),
    ],
)
def test_mean_std_counts_only_finite_seeds(values, text):
    assert compare_wall.mean_std(values) == text
