"""scripts/bench_host.py: lag 1's speedup read against the bound that lag 0's breakdown
sets in the same round."""

from __future__ import annotations

import bench_host  # scripts/ is on pytest's path
import pytest


def run(sps: float, actor: float, learn: float) -> dict:
    return {"sps": sps, "actor_round_seconds": actor, "learn_seconds": learn}


def test_the_share_of_the_overlap_bound_pairs_each_round_with_its_lag_0_run():
    sequential = [run(100.0, 3.0, 1.0), run(80.0, 1.0, 1.0)]
    # Bounds 4/3 and 2: a speedup of 4/3 reaches the first, 1.5 is 0.75 of the second.
    overlapped = [run(400.0 / 3.0, 3.0, 1.0), run(120.0, 1.0, 1.0)]
    shares = bench_host.overlap_shares(overlapped, sequential)
    assert shares == pytest.approx([1.0, 0.75])
