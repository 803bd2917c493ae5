"""Learning curves and SPS of one or more run directories, drawn to a PNG.

Runs are grouped by config name; a group of several runs (seeds) is drawn as its
mean with a min–max band, on the env-step grid of its shortest run.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from jaxrl_async.errors import UserError


def load_run(run_dir: str | Path) -> dict:
    """{"name", "env_steps", "wall_seconds", "episode_return", "sps"} of a run directory."""
    run_dir = Path(run_dir)
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise UserError(f"{run_dir} is not a run directory (no metrics.jsonl)")
    try:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not valid JSON lines: {e}") from None
    if not records:
        raise UserError(f"{path} has no records yet")
    name = run_dir.name
    if (run_dir / "summary.json").is_file():
        name = json.loads((run_dir / "summary.json").read_text()).get("config", name)
    column = lambda key: np.array([np.nan if r.get(key) is None else r[key]  # noqa: E731
                                   for r in records], dtype=float)
    return {"name": name, "env_steps": column("env_steps"),
            "wall_seconds": column("wall_seconds"), "episode_return": column("episode_return"),
            "sps": column("sps")}


def _band(runs: list[dict], x_key: str, y_key: str):
    """(x, mean, low, high) on the shortest run's x grid."""
    shortest = min(runs, key=lambda r: r[x_key][-1])
    x = shortest[x_key]
    ys = np.stack([np.interp(x, r[x_key], _filled(r[y_key])) for r in runs])
    return x, ys.mean(0), ys.min(0), ys.max(0)


def _filled(y: np.ndarray) -> np.ndarray:
    """Log points with no finished episode (NaN) take the previous value."""
    y = y.copy()
    for i in range(len(y)):
        if np.isnan(y[i]):
            y[i] = y[i - 1] if i else np.nan
    return np.nan_to_num(y, nan=np.nanmin(y) if np.isfinite(y).any() else 0.0)


def plot_runs(run_dirs, out: str | Path) -> Path:
    """Draw return vs env steps, return vs wall time and SPS vs env steps; save a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[str, list[dict]] = defaultdict(list)
    for run_dir in run_dirs:
        run = load_run(run_dir)
        groups[run["name"]].append(run)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    panels = [("env_steps", "episode_return", "env steps", "episode return"),
              ("wall_seconds", "episode_return", "wall time (s)", "episode return"),
              ("env_steps", "sps", "env steps", "env steps per second")]
    for ax, (x_key, y_key, x_label, y_label) in zip(axes, panels):
        for name, runs in groups.items():
            x, mean, low, high = _band(runs, x_key, y_key)
            label = name if len(runs) == 1 else f"{name} ({len(runs)} runs)"
            line, = ax.plot(x, mean, label=label, marker="." if len(x) < 20 else None)
            if len(runs) > 1:
                ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
