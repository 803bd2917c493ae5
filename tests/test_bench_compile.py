"""scripts/bench_compile.py: a measurement compiles both programs in a fresh process and
reports positive times; malformed variants are argparse errors."""

import argparse
import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_compile.py"
spec = importlib.util.spec_from_file_location("bench_compile", SCRIPT)
bc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bc)


@pytest.mark.slow
def test_a_measurement_times_init_and_chunk():
    seconds = bc.measure(
        "ppo_cartpole",
        {"xla_backend_optimization_level": 1, "init": {"xla_backend_optimization_level": 0}},
        [
            "env.num_envs=2",
            "pipeline.rollout_len=4",
            "agent.hidden_sizes=[8]",
            "agent.num_minibatches=1",
            "train.total_steps=64",
        ],
    )
    assert set(seconds) == {"init", "chunk"} and all(s > 0 for s in seconds.values())


def test_variants_are_label_and_json_options():
    assert bc.parse_variant('opt1={"xla_backend_optimization_level": 1}') == (
        "opt1",
        {"xla_backend_optimization_level": 1},
    )
    for bad in ("opt1", "={}", "x=[1]", "x={nope"):
        with pytest.raises(argparse.ArgumentTypeError):
            bc.parse_variant(bad)
