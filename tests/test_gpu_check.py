"""scripts/gpu_check.py's bookkeeping and scripts/gpu_results.py's table, without a GPU: a
failing, timed-out or unstarted item is recorded and the next one runs; the JSON renders
into a RESULTS.md section headed by command, commit, machine and date."""

import importlib.util
import json
import math
import subprocess
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A date as gpu_check.py writes it, fixed (the Unix epoch) so the test is the same any day.
EPOCH = datetime.fromtimestamp(0, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_items_cover_the_check_and_write_where_they_are_told(tmp_path):
    check = _script("gpu_check")
    names = [item.name for item in check.ITEMS]
    assert len(names) == len(set(names))
    for config in ("ppo_breakout_minatar", "pqn_breakout_minatar", "ppo_gymnasium_cartpole"):
        assert any(config in item.argv for item in check.ITEMS)
    sweep = next(i for i in check.ITEMS if i.argv[0] == "sweep")
    grid = [a for a in sweep.argv if "=[" in a]
    assert math.prod([len(a.split("=", 1)[1].strip("[]").split(",")) for a in grid]) == 64
    argv = check._argv(check.ITEMS[1], True, tmp_path / "r")
    assert argv[:3] == ["train", "--run-dir", str(tmp_path / "r")]
    assert argv[-len(check.TINY) :] == check.TINY  # the tiny overrides come last and win


def test_failures_are_recorded_not_fatal(tmp_path, monkeypatch):
    check = _script("gpu_check")
    bad = check.Item("bad", ["train", "no_such_config"], 60, [])
    failed = check.run_item(bad, tmp_path, False, 120)
    assert failed["status"] == "failed (exit 2)" and "unknown config" in failed["error"]
    assert check.run_item(bad, tmp_path, False, 1)["status"] == "skipped"

    def too_slow(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], kwargs["timeout"])

    monkeypatch.setattr(check.subprocess, "run", too_slow)
    assert check.run_item(bad, tmp_path, False, 30)["status"] == "timeout"


def test_results_section_from_the_json(tmp_path):
    results = _script("gpu_results")
    data = {
        "command": "python scripts/gpu_check.py --out g",
        "commit": "unknown",  # what the script records without git
        "machine": "host (16 CPU cores)",
        "date": EPOCH,
        "jax": {"jax": "0.0", "devices": ["cuda:0"]},
        "items": [
            {
                "name": "ppo",
                "command": "jaxrl-async train ppo_cartpole",
                "status": "ok",
                "seconds": 30.0,
                "result": {
                    "env_steps": 1000,
                    "sps": 12345.6,
                    "compile_seconds": 2.5,
                    "final_return": 500.0,
                },
            },
            {"name": "brax", "command": "jaxrl-async train x", "status": "timeout"},
        ],
    }
    path = tmp_path / "gpu_check.json"
    path.write_text(json.dumps(data))
    text = results.gpu_section(path)
    assert "`python scripts/gpu_check.py --out g` at commit unknown on host" in text
    row = "| ppo | `jaxrl-async train ppo_cartpole` | ok | 1,000 | 12,346 | 2.5 | 30 | 500.0 |"
    assert row in text
    assert "| brax | `jaxrl-async train x` | timeout | - |" in text
    assert results.gpu_section(tmp_path / "missing.json") == ""
