"""Divergence: a non-finite loss, gradient norm or parameter, found on the host in the
metrics each host call already returns.

The chunk adds one scalar a tick, `param_abs_max` (the largest |parameter| of the
learner, NaN where any is NaN), so a parameter that overflows is caught even while the
loss that moved it was finite. The host checks each call's metrics before it logs them
and before a checkpoint of that call's state is written: under `train.nan_policy=stop`
the run ends with TrainingDiverged and no checkpoint of a non-finite state; under
`warn` the first non-finite metric is written once and the run goes on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.errors import TrainingDiverged

# A metric is checked when its name contains one of these.
CHECKED = ("loss", "grad_norm", "param_abs_max")


def param_abs_max(params) -> jax.Array:
    """max |p| over the floating leaves of `params`: finite exactly when every
    parameter is (a norm would overflow first)."""
    leaves = [x for x in jax.tree.leaves(params) if jnp.issubdtype(x.dtype, jnp.inexact)]
    if not leaves:
        return jnp.float32(0.0)
    return jnp.max(jnp.stack([jnp.max(jnp.abs(x)).astype(jnp.float32) for x in leaves]))


def checked(name: str) -> bool:
    return any(part in name for part in CHECKED)


@dataclasses.dataclass(frozen=True)
class NonFinite:
    """The first non-finite metric of a host call: its name, value, the tick of the call
    (0-based) and the run (the position among train.num_seeds; None with one seed)."""

    metric: str
    value: float
    tick: int
    run: int | None


def non_finite(metrics: dict, ticks: int, seeds: int) -> list[NonFinite]:
    """Each diverged run's first non-finite checked metric in one host call's metrics
    ([K] per key, or [N, K] with N seeds; a key with fewer than K values stands for the
    call's last ticks), earliest first; ties go to the first key. [] when all are finite."""
    first: dict[int, NonFinite] = {}
    for name, value in metrics.items():
        if not checked(name):
            continue
        values = np.asarray(value, np.float64).reshape(seeds, -1)
        for run, row in enumerate(values):
            bad = np.flatnonzero(~np.isfinite(row))
            if not bad.size:
                continue
            tick = ticks - row.size + int(bad[0])
            if run not in first or tick < first[run].tick:
                first[run] = NonFinite(name, float(row[bad[0]]), tick, run if seeds > 1 else None)
    return sorted(first.values(), key=lambda f: (f.tick, f.run or 0))


@dataclasses.dataclass
class DivergenceGuard:
    """Checks each host call's metrics (`check`). `policy` is train.nan_policy; `warn`
    writes a line; `name_run(k)` names run k of several (a seed, a sweep's point)."""

    policy: str
    ticks: int  # ticks per host call
    batch: int  # env steps per tick
    seeds: int  # runs side by side: metrics are [seeds, K] when more than one
    warn: Callable[[str], None]
    name_run: Callable[[int], str] = lambda k: f"run {k}"
    warned: set = dataclasses.field(default_factory=set)

    def check(self, calls: int, metrics: dict) -> None:
        """Raise TrainingDiverged (stop), or warn once per run (warn), where the metrics of
        host call `calls` (1-based) hold a non-finite checked metric."""
        for found in non_finite(metrics, self.ticks, self.seeds):
            self._report(calls, found)

    def _report(self, calls: int, found: NonFinite) -> None:
        update = (calls - 1) * self.ticks + found.tick + 1
        where = "" if found.run is None else f" in {self.name_run(found.run)}"
        what = (
            f"{found.metric} is {found.value} at update {update:,} "
            f"(env step {update * self.batch:,}){where}"
        )
        if self.policy == "stop":
            raise TrainingDiverged(what)
        if found.run not in self.warned:  # once per run (once in all for one seed)
            self.warned.add(found.run)
            self.warn(f"warning: training diverged: {what}; going on (train.nan_policy=warn)")
