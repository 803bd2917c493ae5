"""scripts/harness.py: programs run in interleaved rounds, figures shown as median
[min–max], the JSON a benchmark writes, and its table put into docs/performance.json."""

import json
import shutil

import harness  # scripts/ is on pytest's path
import performance
import pytest

from tests.helpers.cli import ROOT


def test_rounds_interleave_the_programs_and_skip_the_warm_up():
    calls = []

    def program(name):
        def run(round_):
            calls.append((name, round_))
            return {"sps": 100.0 * (round_ + 1), "name": name}

        return run

    runs = harness.interleave({"a": program("a"), "b": program("b")}, 2, warmup=1)
    assert calls == [("a", 0), ("b", 0), ("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert harness.of(runs["a"], "sps") == [100.0, 200.0]
    assert harness.ratios(runs["a"], runs["b"]) == [1.0, 1.0]


def test_cells_are_median_min_max():
    assert harness.cell([3.0, 1.0, 2.0], ".1f", " s") == "2.0 s [1.0–3.0]"
    assert harness.cell([256_400.0, 255_000.0, 262_000.0]) == "256k [255k–262k]"
    assert harness.cell([1.48e6, 1.49e6, 11.0e6]) == "1.49M [1.48M–11.0M]"
    assert harness.cell([512.0, None]) == "512 [512–512]"
    assert harness.cell([None]) == "-"
    assert [harness.si(x) for x in (6300.0, 999.0, 57_140.0)] == ["6.30k", "999", "57.1k"]


def test_a_report_becomes_a_table_of_the_page(tmp_path, monkeypatch, capsys):
    out = tmp_path / "bench.json"
    argv = ["--repeats", "3", "--json", str(out)]
    harness.report("scripts/bench_x.py", argv, ["run", "SPS"], [["a", "1k [1k–1k]"]], str(out))
    assert "| a | 1k [1k–1k] |" in capsys.readouterr().out
    record = json.loads(out.read_text())
    assert record["command"] == f"python scripts/bench_x.py --repeats 3 --json {out}"
    assert {"commit", "machine", "date"} <= set(record)

    source, page = tmp_path / "performance.json", tmp_path / "performance.md"
    shutil.copyfile(ROOT / "docs" / "performance.json", source)
    assert harness.dump(performance.load(source)) == source.read_text()  # kept as dumped
    monkeypatch.setattr(performance, "SOURCE", source)
    monkeypatch.setattr(performance, "PAGE", page)
    before = performance.load(source)
    table = ["table", str(out), "--title", "T", "--section", "Sweeps", "--machine", "M"]
    assert harness.main(table) == 0
    tables = performance.load(source)
    assert len(tables) == len(before) + 1
    added = tables[max(i for i, t in enumerate(tables) if t["section"] == "Sweeps")]
    assert added["title"] == "T" and added["rows"] == [["a", "1k [1k–1k]"]]
    assert added["command"] == "python scripts/bench_x.py --repeats 3"  # scratch --json dropped
    assert "### T" in page.read_text()
    assert harness.main([*table[:3], "U", *table[4:]]) == 0  # another title: added
    assert len(performance.load(source)) == len(before) + 2
    assert harness.main(table) == 0  # the same title: replaced
    assert len(performance.load(source)) == len(before) + 2


def test_a_failed_child_ends_the_script():
    assert harness.child("import json; print('x'); print(json.dumps({'a': 1}))") == {"a": 1}
    with pytest.raises(SystemExit, match="ZeroDivisionError"):
        harness.child("1 / 0")
