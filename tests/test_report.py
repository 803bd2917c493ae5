"""`jaxrl-async report` and its statistics (`analysis/stats.py`): IQM, mean, median and
optimality gap with stratified-bootstrap intervals, probability of improvement,
performance profiles, against plain-numpy references and exact small cases; the command
end to end on run and sweep directories written by the library's own writers."""

import json
import math
import warnings

import numpy as np
import pytest

from jaxrl_async.analysis import stats
from jaxrl_async.analysis.reference_scores import REFERENCE
from jaxrl_async.analysis.sweep_table import format_table, table_row
from jaxrl_async.config.loader import load_config
from jaxrl_async.run.sinks import JsonlSink
from tests.helpers.cli import run_cli_in_process


def _iqm_reference(x):
    """The mean of the scores left after dropping the lowest and highest quarter."""
    x = np.sort(np.asarray(x, float))
    cut = len(x) // 4
    return x[cut : len(x) - cut].mean()


def _bootstrap_reference(strata, statistic, resamples, seed, confidence=0.95):
    """A stratified bootstrap written as a loop: each task's runs resampled on their own,
    the statistic of all of them together, percentiles of the resampled statistics."""
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(resamples):
        drawn = [np.asarray(s)[rng.integers(0, len(s), len(s))] for s in strata]
        values.append(statistic(np.concatenate(drawn)))
    tail = (1 - confidence) / 2 * 100
    return np.percentile(values, [tail, 100 - tail])


@pytest.mark.parametrize("n", [1, 3, 4, 5, 8, 13])
def test_iqm_drops_a_quarter_at_each_end(n):
    x = np.random.default_rng(n).normal(size=n) * 10
    assert stats.iqm(x) == pytest.approx(_iqm_reference(x))
    assert stats.iqm(np.arange(1, 9)) == 4.5  # mean of 3, 4, 5, 6


def test_optimality_gap_and_normalisation_exact():
    assert stats.optimality_gap([0.5, 1.2, 0.8]) == pytest.approx((0.5 + 0.0 + 0.2) / 3)
    ref = REFERENCE["CartPole-v1"]
    assert stats.normalize([ref.random, ref.high], ref.random, ref.high) == pytest.approx([0, 1])


@pytest.mark.parametrize("name", ["iqm", "mean", "median"])
def test_intervals_match_a_plain_numpy_stratified_bootstrap(name):
    rng = np.random.default_rng(0)
    strata = [rng.normal(loc, 1.0, size) for loc, size in ((0.0, 6), (3.0, 9), (1.0, 5))]
    reference = {"iqm": _iqm_reference, "mean": np.mean, "median": np.median}[name]
    point, (low, high) = stats.interval(strata, stats.AGGREGATES[name], resamples=4000)
    expected = _bootstrap_reference(strata, reference, 4000, seed=1)
    assert point == pytest.approx(reference(np.concatenate(strata)))
    # Two Monte Carlo estimates of the same percentiles: equal within their noise.
    assert [low, high] == pytest.approx(expected, abs=0.1 * (expected[1] - expected[0]))
    assert low < point < high


def test_stratification_resamples_within_each_task():
    # Task a scores 0, task b 1: every stratified resample keeps 4 of each, so the mean is
    # exactly 0.5 in all of them (an unstratified bootstrap would spread it).
    point, ci = stats.interval([[0.0] * 4, [1.0] * 4], stats.AGGREGATES["mean"])
    assert point == 0.5 and ci == (0.5, 0.5)
    # A task of one run is held fixed; the others vary.
    point, (low, high) = stats.interval([[10.0], [0.0, 1.0, 2.0]], stats.AGGREGATES["mean"])
    assert point == 3.25 and 10 / 4 <= low < high <= 16 / 4


def test_a_fixed_seed_reproduces_the_intervals_and_another_seed_moves_them():
    strata = [np.random.default_rng(3).normal(size=7), [1.0, 2.5, 0.5]]
    first = stats.describe(strata, seed=4)
    assert stats.describe(strata, seed=4) == first
    assert stats.describe(strata, seed=5)["iqm_ci"] != first["iqm_ci"]


def test_probability_of_improvement_exact_and_complementary():
    # Task 1: P(X > Y) over the 6 pairs, ties half: (1 + 0.5 + 0) + (1 + 1 + 1) = 4.5 -> 0.75;
    # task 2: 0. Averaged over the two tasks: 0.375.
    value, (low, high) = stats.probability_of_improvement([[3, 5], [0]], [[1, 3, 4], [1]])
    assert value == 0.375 and 0 <= low <= value <= high <= 1
    rng = np.random.default_rng(1)
    x, y = [rng.normal(size=5), rng.normal(size=4)], [rng.normal(size=6), rng.normal(size=3)]
    forward, _ = stats.probability_of_improvement(x, y)
    backward, _ = stats.probability_of_improvement(y, x)
    assert forward + backward == pytest.approx(1.0)


def test_performance_profile_averages_over_tasks():
    profile = stats.performance_profile([[1, 2, 3], [5, 6]], [0, 2.5, 5.5, 7])
    assert profile == pytest.approx([1, (1 / 3 + 1) / 2, (0 + 0.5) / 2, 0])


def test_the_sweep_table_uses_the_same_statistics():
    records = [{"env_steps": 1, **{f"episode_return/seed{k}": 10.0 * k for k in range(4)}}]
    row = table_row({"agent.learning_rate": 0.1}, records, 4, "p")
    iqm, ci = stats.interval([[0.0, 10.0, 20.0, 30.0]], stats.iqm)
    assert (row["final_return_iqm"], row["final_return_iqm_ci"]) == (iqm, list(ci))
    assert f"{iqm:.1f} [{ci[0]:.1f}, {ci[1]:.1f}]" in format_table([row], 0)


# ------------------------------------------------------------------ the command end to end


def _write_run(run_dir, name, overrides, seed_curves):
    """A run directory as a training run writes it: config.yaml, metrics.jsonl through the
    library's sink (one record per log point, `episode_return/seed<k>` with several seeds),
    summary.json naming the config. `seed_curves`: per seed, its return at each log point."""
    config = load_config(name, [*overrides, f"train.num_seeds={len(seed_curves)}"])
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(config.to_yaml())
    sink = JsonlSink(run_dir / "metrics.jsonl")
    for step, returns in enumerate(zip(*seed_curves)):
        record = {"env_steps": 1024 * (step + 1), "episode_return": float(np.nanmean(returns))}
        if len(returns) > 1:
            record.update({f"episode_return/seed{k}": r for k, r in enumerate(returns)})
        sink(record)
    sink.close()
    (run_dir / "summary.json").write_text(json.dumps({"config": name}))


def _normalized(returns):
    ref = REFERENCE["CartPole-v1"]
    return list(stats.normalize(returns, ref.random, ref.high))


def _report(tmp_path, *args, out="out"):
    """`jaxrl-async report ARGS --out OUT` in process: (report.json, report.md, stderr), with
    every Python warning raised while it runs (matplotlib's among them) an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, err = run_cli_in_process("report", *args, "--out", str(tmp_path / out), cwd=tmp_path)
    assert code == 0, err
    report = json.loads((tmp_path / out / "report.json").read_text())
    return report, (tmp_path / out / "report.md").read_text(), err


def test_report_of_runs_by_config_name(tmp_path):
    nan = math.nan
    # ppo_cartpole: one run of 3 seeds; seed 2's last log point finished no episode, so its
    # final return is the one before (the window summary.json takes). Another run of the
    # same config with 2 seeds (3 and 4) is the same experiment: one group of 5.
    _write_run(tmp_path / "a", "ppo_cartpole", [], [[50, 380, 400], [60, 500, 500], [70, 300, nan]])
    _write_run(tmp_path / "a3", "ppo_cartpole", ["train.seed=3"], [[20, 300], [30, nan]])
    for k, final in enumerate([200.0, 450.0, 250.0]):
        _write_run(
            tmp_path / "b" / f"seed{k}", "ppo_cartpole_async", [f"train.seed={k}"], [[10.0, final]]
        )
    report, table, err = _report(tmp_path, *(str(tmp_path / d) for d in ("a", "a3", "b")))
    assert err == ""  # nothing merged that differs, no warning of any kind
    assert report["score"] == "normalized_score"
    assert report["differing_keys"] == ["pipeline.lag"]
    a, b = report["groups"]
    # The configs differ in their names too: each group is its name's only one.
    assert (a["name"], b["name"]) == ("ppo_cartpole", "ppo_cartpole_async")
    assert (a["config"], b["config"]) == ({"pipeline.lag": 0}, {"pipeline.lag": 1})
    assert a["final_returns"] == [400, 500, 300, 300, 30] and a["runs"] == 5
    assert b["final_returns"] == [200, 450, 250]
    scores_a, scores_b = _normalized([400, 500, 300, 300, 30]), _normalized([200, 450, 250])
    norm_a, norm_b = a["normalized_score"], b["normalized_score"]
    assert norm_a["values"]["CartPole-v1"] == pytest.approx(scores_a)
    assert norm_a["iqm"] == pytest.approx(_iqm_reference(scores_a))
    assert norm_a["median"] == pytest.approx(np.median(scores_a))
    assert norm_b["mean"] == pytest.approx(np.mean(scores_b))
    gap = np.mean(np.maximum(1 - np.asarray(scores_b), 0))
    assert norm_b["optimality_gap"] == pytest.approx(gap)
    for block in (norm_a, norm_b, a["final_return"]["CartPole-v1"]):
        for key in ("iqm", "mean", "median", "optimality_gap"):
            if key in block:
                assert block[f"{key}_ci"][0] <= block[key] <= block[f"{key}_ci"][1]
    wins = sum((x > y) + 0.5 * (x == y) for x in scores_a for y in scores_b) / 15
    poi = report["probability_of_improvement"]["ppo_cartpole > ppo_cartpole_async"]
    assert poi["value"] == pytest.approx(wins)
    assert "| ppo_cartpole | 5 | CartPole-v1 |" in table and "![profile](profile.png)" in table
    assert "differ in pipeline.lag." in table
    for png in ("intervals.png", "profile.png"):
        data = (tmp_path / "out" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


def test_two_settings_of_one_config_are_two_groups_named_by_what_differs(tmp_path):
    # The case: ppo_cartpole at agent.learning_rate=0 and at its default, 5 seeds
    # each; a third run at the default with other seeds, another seed count and other
    # bookkeeping keys (checkpoints, progress, compile cache, W&B) is the same experiment.
    _write_run(
        tmp_path / "lr0", "ppo_cartpole", ["agent.learning_rate=0.0"], _curves([20, 25, 18, 30, 22])
    )
    _write_run(tmp_path / "base", "ppo_cartpole", [], _curves([480, 500, 350, 500, 420]))
    bookkeeping = [
        "train.seed=5",
        "checkpoint.every=2048",
        "train.progress=false",
        "train.compile_cache=false",
        "logger.wandb_project=other",
    ]
    _write_run(tmp_path / "more" / "base", "ppo_cartpole", bookkeeping, _curves([30, 490, 500]))
    report, table, err = _report(tmp_path, "lr0", "base", "more")
    assert err == ""
    lr0, base = report["groups"]
    assert (lr0["name"], base["name"]) == ("agent.learning_rate=0", "agent.learning_rate=0.00025")
    assert report["differing_keys"] == ["agent.learning_rate"]
    assert (lr0["config"], base["config"]) == (
        {"agent.learning_rate": 0.0},
        {"agent.learning_rate": 0.00025},
    )
    assert lr0["final_returns"] == [20, 25, 18, 30, 22]
    assert base["final_returns"] == [480, 500, 350, 500, 420, 30, 490, 500] and base["runs"] == 8
    assert base["sources"] == ["base", "more/base"]
    # P(X > Y) of the two settings, over every pair of runs (ties half): lr 0 wins none
    # and ties one (its 30 against the third run's 30).
    x, y = _normalized(lr0["final_returns"]), _normalized(base["final_returns"])
    wins = sum((a > b) + 0.5 * (a == b) for a in x for b in y) / (len(x) * len(y))
    poi = report["probability_of_improvement"]
    assert list(poi) == ["agent.learning_rate=0 > agent.learning_rate=0.00025"]
    assert poi["agent.learning_rate=0 > agent.learning_rate=0.00025"]["value"] == pytest.approx(
        wins
    )
    assert wins == 0.5 / 40
    assert "| agent.learning_rate=0 | 5 | CartPole-v1 |" in table


def test_report_json_names_its_scales(tmp_path):
    # CartPole has reference returns: raw final returns per task and normalised scores.
    _write_run(tmp_path / "cartpole", "ppo_cartpole", [], _curves([100, 300, 500, 250]))
    report, table, _ = _report(tmp_path, "cartpole")
    (group,) = report["groups"]
    assert group["name"] == "ppo_cartpole" and report["differing_keys"] == []
    assert report["score"] == "normalized_score"
    assert set(report["scales"]) == {"final_return", "normalized_score"}
    assert report["reference_returns"] == {"CartPole-v1": {"random": 22.4, "reference": 500.0}}
    raw = group["final_return"]["CartPole-v1"]
    assert raw["runs"] == 4 and raw["values"] == [100, 300, 500, 250]
    assert raw["iqm"] == pytest.approx(275) and raw["median"] == pytest.approx(275)
    assert "optimality_gap" not in raw  # a gap below 1 means nothing on raw returns
    norm = group["normalized_score"]
    assert norm["iqm"] == pytest.approx(_iqm_reference(_normalized([100, 300, 500, 250])))
    assert norm["optimality_gap"] > 0
    assert "| ppo_cartpole | CartPole-v1 | 4 | 275 [" in table  # the raw table
    # MinAtar Breakout has none: final returns only, and the report says so.
    _write_run(tmp_path / "breakout", "ppo_breakout_minatar", ["eval.every=0"], _curves([3, 5, 9]))
    report, table, _ = _report(tmp_path, "breakout", out="raw")
    (group,) = report["groups"]
    assert report["score"] == "final_return" and set(report["scales"]) == {"final_return"}
    assert report["reference_returns"] is None and group["normalized_score"] is None
    assert group["final_return"]["Breakout-MinAtar"]["median"] == 5
    assert "final returns over runs" in table and "optimality gap" not in table


def test_group_by_that_merges_differing_configs_warns_in_one_line(tmp_path):
    _write_run(tmp_path / "lr0", "ppo_cartpole", ["agent.learning_rate=0.0"], _curves([20, 25]))
    _write_run(tmp_path / "base", "ppo_cartpole", ["train.seed=2"], _curves([480, 500]))
    report, table, err = _report(tmp_path, "lr0", "base", "--group-by", "agent.name")
    assert [g["name"] for g in report["groups"]] == ["agent.name=ppo"]
    warning = (
        "group 'agent.name=ppo' merges runs of one env whose configs differ in agent.learning_rate"
    )
    assert report["warnings"] == [warning]
    assert err == f"warning: {warning}\n"  # one line, on stderr
    assert f"**Warning:** {warning}." in table
    # Grouping across envs is what --group-by is for: CartPole's and Acrobot's configs
    # differ (env.name, env.num_envs), but within each env the group is one experiment.
    _write_run(tmp_path / "acrobot", "ppo_acrobot", [], _curves([-200, -150]))
    report, _, err = _report(tmp_path, "base", "acrobot", "--group-by", "pipeline.lag", out="lag")
    assert err == "" and report["warnings"] == []
    assert report["groups"][0]["tasks"] == ["Acrobot-v1", "CartPole-v1"]


def test_a_seed_held_twice_is_a_warning(tmp_path):
    # The same config at the same seeds twice (a rerun, not new samples).
    _write_run(tmp_path / "a", "ppo_cartpole", [], _curves([400, 450]))
    _write_run(tmp_path / "b", "ppo_cartpole", ["train.seed=1"], _curves([300, 350]))
    report, _, err = _report(tmp_path, "a", "b")
    assert report["groups"][0]["runs"] == 4
    assert err.count("\n") == 1 and "holds seed 1 of one experiment more than once" in err


def test_no_warning_reaches_the_terminal_with_many_groups(tmp_path):
    # Matplotlib's "Tight layout not applied" came with two groups and more, on stderr
    # through the warnings module; _report turns any warning into an error.
    for k, lr in enumerate((0.0, 1e-4, 2.5e-4, 1e-3, 3e-3, 0.01)):
        _write_run(
            tmp_path / f"lr{k}", "ppo_cartpole", [f"agent.learning_rate={lr}"], _curves([k, 10 * k])
        )
    report, _, err = _report(tmp_path, *(f"lr{k}" for k in range(6)))
    assert err == "" and len(report["groups"]) == 6
    # One group, and group names too long for a fixed width (a value of 200 characters).
    report, _, err = _report(tmp_path, "lr0", out="one")
    assert err == "" and len(report["groups"]) == 1
    for k, project in enumerate(("W" * 200, "m" * 150)):
        config = ["agent.learning_rate=0.0", f"logger.wandb_project={project}", f"train.seed={k}"]
        _write_run(tmp_path / "long" / str(k), "ppo_cartpole", config, _curves([k, 2 * k]))
    report, _, err = _report(tmp_path, "long", "--group-by", "logger.wandb_project", out="long")
    assert err == "" and len(report["groups"]) == 2


def _curves(finals):
    """One curve of two log points per seed, ending at its final return."""
    return [[1.0, float(f)] for f in finals]


def test_report_groups_by_a_config_key_and_by_sweep_point(tmp_path):
    for lag in (0, 1):
        for seed in (0, 1):
            _write_run(
                tmp_path / f"lag{lag}" / f"s{seed}",
                "ppo_cartpole",
                [f"pipeline.lag={lag}", f"train.seed={seed}"],
                [[10.0 + lag, 100.0 * (lag + seed + 1)]],
            )
    out = tmp_path / "by_key"
    code, err = run_cli_in_process(
        "report", str(tmp_path), "--group-by", "pipeline.lag", "--out", str(out), cwd=tmp_path
    )
    assert code == 0, err
    groups = json.loads((out / "report.json").read_text())["groups"]
    assert [(g["name"], g["final_returns"]) for g in groups] == [
        ("pipeline.lag=0", [100, 200]),
        ("pipeline.lag=1", [200, 300]),
    ]

    sweep = tmp_path / "sweep"
    rows = []
    for i, lr in enumerate((0.001, 0.01)):
        point = sweep / f"{i:03d}_learning_rate={lr}"
        _write_run(
            point,
            "ppo_cartpole",
            [f"agent.learning_rate={lr}"],
            [[1.0, 20.0 * (i + 1)], [1.0, 30.0 * (i + 1)]],
        )
        records = [json.loads(line) for line in (point / "metrics.jsonl").read_text().splitlines()]
        rows.append(table_row({"agent.learning_rate": lr}, records, 2, point.name))
    (sweep / "sweep.json").write_text(json.dumps({"points": rows, "best": 1}))
    code, err = run_cli_in_process(
        "report", str(sweep), "--out", str(tmp_path / "by_point"), cwd=tmp_path
    )
    assert code == 0, err
    groups = json.loads((tmp_path / "by_point" / "report.json").read_text())["groups"]
    # A sweep's groups are its points, named by the swept keys.
    assert [(g["name"], g["final_returns"]) for g in groups] == [
        ("agent.learning_rate=0.001", [20, 30]),
        ("agent.learning_rate=0.01", [40, 60]),
    ]


@pytest.mark.parametrize(
    "args, mentions",
    [
        (["missing"], "not a directory"),
        (["empty"], "no run directory"),
        (["runs", "--group-by", "agent.nope"], "agent.nope"),
        (["runs", "--group-by", "agent.name"], "mixes envs"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_with_nothing_written(tmp_path, args, mentions):
    (tmp_path / "empty").mkdir()
    _write_run(tmp_path / "runs" / "a", "ppo_cartpole", [], [[1.0]])
    _write_run(tmp_path / "runs" / "b", "ppo_breakout_minatar", [], [[1.0]])
    code, err = run_cli_in_process("report", *args, "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert code == 2 and mentions in err and err.strip().count("\n") == 0
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # compiles one random-policy program per env of the table
def test_the_tables_random_returns_are_what_the_script_measures():
    import importlib.util

    from tests.helpers.cli import ROOT

    path = ROOT / "scripts" / "reference_scores.py"
    spec = importlib.util.spec_from_file_location("reference_scores_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    for name, ref in REFERENCE.items():
        returns = np.asarray(script.random_returns(name.split(":")[-1], 2000, seed=1))
        error = returns.std(ddof=1) / np.sqrt(len(returns))
        # Other episodes than the table's: within five standard errors of its value (and 1%
        # for its rounding).
        assert abs(returns.mean() - ref.random) <= 5 * error + 0.01 * abs(ref.random) + 0.01, name
