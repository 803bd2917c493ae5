"""Assertions for end-to-end learning tests over several seeds trained in one program.

A learning test never rests on one seed: different CPUs give different float bits, and
one seed that happens to solve says nothing about the configuration. Each test trains
`train.num_seeds` seeds together and asserts on the distribution of their final returns.
"""

import numpy as np


def seed_returns(result) -> np.ndarray:
    """The final episode return of every seed of a `train.num_seeds` run."""
    returns = result.summary.get("final_return_seeds") or [result.summary["final_return"]]
    return np.asarray([np.nan if r is None else r for r in returns], np.float64)


def curves(result) -> np.ndarray:
    """Per-seed learning curves [seeds, log points] (NaN where no episode ended)."""
    n = result.summary.get("num_seeds", 1)
    if n == 1:
        return np.asarray(result.metrics["episode_return"])[None]
    return np.stack([np.asarray(result.metrics[f"episode_return/seed{k}"]) for k in range(n)])


def assert_learns(result, threshold: float, min_passing: int):
    """The median seed reaches `threshold` and at least `min_passing` seeds do."""
    returns = seed_returns(result)
    passing = int(np.sum(returns >= threshold))
    message = (f"final returns per seed {np.round(returns, 1).tolist()}: {passing} of "
               f"{len(returns)} reach {threshold} (need {min_passing} and the median)")
    assert passing >= min_passing and np.nanmedian(returns) >= threshold, message
    return returns
