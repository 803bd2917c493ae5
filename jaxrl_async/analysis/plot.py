"""Learning curves and SPS of run directories, or of a sweep directory, drawn to a PNG.

Run directories are grouped only when their resolved configs (RUN_DIR/config.yaml) differ
in `train.seed` alone, or in keys that do not change training (IGNORED_KEYS); runs of one
config that differ otherwise are separate curves labelled by what differs. A group is
drawn as the mean over its seeds (all seeds of all its runs: a run with
train.num_seeds > 1 logs each as `episode_return/seed<k>`) with a min–max band, on the
env-step grid of its shortest run.

A sweep directory (SWEEP_DIR/sweep.json, one run directory per grid point) is drawn as
one curve per point, the mean over its seeds with a mean ± std band (population std),
and, when the sweep varies one key only, its final return against that key.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from jaxrl_async.errors import UserError

# Keys that do not change what is trained: runs that differ only here are one config.
IGNORED_KEYS = ("train.seed", "train.progress", "train.compile_cache")
IGNORED_SECTIONS = ("checkpoint.", "eval.", "logger.")
# Sweeps with more points than this colour their curves by final return instead of a legend.
MAX_LEGEND_POINTS = 16


# ---------------------------------------------------------------------------- run directories


def load_run(run_dir: str | Path) -> dict:
    """{"name", "config", "env_steps", "wall_seconds", "episode_return", "seed_returns",
    "sps"} of a run directory. "config" is config.yaml flattened to `section.key` (None
    without one); "seed_returns" is [seeds, log points] for a run of several seeds, else None.
    """
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

    def column(key):
        return np.array([np.nan if r.get(key) is None else r[key] for r in records], float)

    seed_keys: list[str] = []  # a run of N seeds logs episode_return/seed0 .. seed{N-1}
    while f"episode_return/seed{len(seed_keys)}" in records[0]:
        seed_keys.append(f"episode_return/seed{len(seed_keys)}")
    return {
        "name": name,
        "config": _load_config(run_dir),
        "env_steps": column("env_steps"),
        "wall_seconds": column("wall_seconds"),
        "episode_return": column("episode_return"),
        "seed_returns": np.stack([column(k) for k in seed_keys]) if seed_keys else None,
        "sps": column("sps"),
    }


def _load_config(run_dir: Path) -> dict | None:
    path = run_dir / "config.yaml"
    if not path.is_file():
        return None
    try:
        tree = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise UserError(f"{path} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(tree, dict):
        raise UserError(f"{path} is not a mapping of config sections")
    return _flatten(tree)


def _flatten(tree: dict, prefix: str = "") -> dict:
    # As rundir's, which is not imported: it loads JAX and orbax, which a plot does not need.
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        out.update(_flatten(value, name) if isinstance(value, dict) else {name: value})
    return out


def _training_keys(config: dict) -> dict:
    """The keys of a flattened config that change training (the name is the group's own)."""
    return {
        k: v
        for k, v in config.items()
        if k != "name" and k not in IGNORED_KEYS and not k.startswith(IGNORED_SECTIONS)
    }


def group_runs(runs: list[dict]) -> list[tuple[str, list[dict]]]:
    """(label, runs) per distinct training config, in the order first seen.

    Runs of one name are one group if their configs differ only in ignored keys; if not,
    each group's label adds the keys that differ within the name, e.g.
    `ppo_cartpole (agent.learning_rate=0.001)`. Runs without config.yaml group by name.
    """
    by_name: dict[str, dict] = {}
    for run in runs:
        config = None if run["config"] is None else _training_keys(run["config"])
        # JSON text as the key: values may be lists (hidden_sizes), which do not hash.
        key = None if config is None else json.dumps(config, sort_keys=True, default=str)
        by_name.setdefault(run["name"], {}).setdefault(key, (config, []))[1].append(run)
    groups = []
    for name, by_config in by_name.items():
        configs = [c for c, _ in by_config.values() if c is not None]
        differing = sorted(
            {k for c in configs for k in c if any(c.get(k) != other.get(k) for other in configs)}
        )
        for config, members in by_config.values():
            if config is None and len(by_config) > 1:
                label = f"{name} (no config.yaml)"
            elif config is None or not differing:
                label = name
            else:
                label = f"{name} ({', '.join(f'{k}={_text(config.get(k))}' for k in differing)})"
            groups.append((label, members))
    return groups


def _curves(run: dict, y_key: str) -> list[np.ndarray]:
    """A run's curves of `y_key`: one per seed for the return of a run of several seeds."""
    if y_key == "episode_return" and run["seed_returns"] is not None:
        return list(run["seed_returns"])
    return [run[y_key]]


def _band(runs: list[dict], x_key: str, y_key: str, spread: str = "minmax"):
    """(x, mean, low, high) over every curve of `runs`, on the shortest run's x grid; the
    band is min–max, or mean ± std with spread="std"."""
    shortest = min(runs, key=lambda r: r[x_key][-1])
    x = shortest[x_key]
    ys = np.stack([np.interp(x, r[x_key], _filled(y)) for r in runs for y in _curves(r, y_key)])
    mean = ys.mean(0)
    if spread == "std":
        return x, mean, mean - ys.std(0), mean + ys.std(0)
    return x, mean, ys.min(0), ys.max(0)


def _filled(y: np.ndarray) -> np.ndarray:
    """Log points with no finished episode (NaN) take the previous value."""
    y = y.copy()
    for i in range(len(y)):
        if np.isnan(y[i]):
            y[i] = y[i - 1] if i else np.nan
    return np.nan_to_num(y, nan=np.nanmin(y) if np.isfinite(y).any() else 0.0)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: str | Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100, bbox_inches="tight")  # "tight": keeps an outside legend
    _pyplot().close(fig)
    return out


def plot_runs(run_dirs, out: str | Path, baselines: dict[str, float] | None = None) -> Path:
    """Draw return vs env steps, return vs wall time and SPS vs env steps; save a PNG.
    `baselines` (label -> return, e.g. random play) are dashed lines on the return panels."""
    plt = _pyplot()
    groups = group_runs([load_run(run_dir) for run_dir in run_dirs])
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    panels = [
        ("env_steps", "episode_return", "env steps", "episode return"),
        ("wall_seconds", "episode_return", "wall time (s)", "episode return"),
        ("env_steps", "sps", "env steps", "env steps per second"),
    ]
    for ax, (x_key, y_key, x_label, y_label) in zip(axes, panels):
        for label, runs in groups:
            x, mean, low, high = _band(runs, x_key, y_key)
            seeds = sum(len(_curves(r, "episode_return")) for r in runs)
            if seeds > 1:
                label = f"{label} ({seeds} seeds)"
            (line,) = ax.plot(x, mean, label=label, marker="." if len(x) < 20 else None)
            if sum(len(_curves(r, y_key)) for r in runs) > 1:
                ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2)
        if y_key == "episode_return":
            for (label, value), style in zip((baselines or {}).items(), ("--", ":", "-.")):
                ax.axhline(value, color="0.4", linestyle=style, linewidth=1, label=label)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.tight_layout()
    return _save(fig, out)


# ---------------------------------------------------------------------------- sweep directories


def is_sweep_dir(path: str | Path) -> bool:
    return (Path(path) / "sweep.json").is_file()


def load_sweep(sweep_dir: str | Path) -> dict:
    """SWEEP_DIR/sweep.json, checked: {"points": [...], "best": index or None}; each point's
    run_dir is made absolute and must exist."""
    sweep_dir = Path(sweep_dir)
    path = sweep_dir / "sweep.json"
    try:
        sweep = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise UserError(f"cannot read {path}: {str(e).splitlines()[0]}") from None
    points = sweep.get("points") if isinstance(sweep, dict) else None
    if not isinstance(points, list) or not points:
        raise UserError(f"{path} is malformed: no list of points")
    for i, point in enumerate(points):
        _check_point(point, f"{path} point {i}")
        point["run_dir"] = sweep_dir / point["run_dir"]
        if not point["run_dir"].is_dir():
            raise UserError(f"{path} point {i} names run_dir {point['run_dir']}, which is missing")
    best = sweep.get("best")
    if best is not None and not (isinstance(best, int) and 0 <= best < len(points)):
        raise UserError(f"{path} is malformed: best={best!r} is not a point's index")
    return {"points": points, "best": best}


def _check_point(point, where: str) -> None:
    if not isinstance(point, dict):
        raise UserError(f"{where} is malformed: not an object")
    if not isinstance(point.get("overrides"), dict) or not isinstance(point.get("run_dir"), str):
        raise UserError(f"{where} is malformed: needs overrides (an object) and run_dir (a path)")
    for key in ("final_return_mean", "final_return_std"):  # null: no episode ended
        if not isinstance(point.get(key), (int, float, type(None))):
            raise UserError(f"{where} is malformed: {key}={point[key]!r} is not a number")


def _short_keys(keys) -> dict[str, str]:
    """Each dotted key to its last part, where no other key shares that part."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: s if last.count(s) == 1 else k for k, s in zip(keys, last)}


def _point_label(overrides: dict, short: dict[str, str]) -> str:
    return ", ".join(f"{short[k]}={_text(v)}" for k, v in overrides.items()) or "defaults"


def _text(value) -> str:
    """A value for a label: floats to 6 significant digits (a geomspace grid's 0.000803...)."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def sweep_bands(sweep: dict) -> list[dict]:
    """Per point of a load_sweep() result: {"label", "env_steps", "mean", "std",
    "final_return"}, the return over its seeds (mean ± population std) on its log points."""
    keys = list(dict.fromkeys(k for p in sweep["points"] for k in p["overrides"]))
    short = _short_keys(keys)
    bands = []
    for point in sweep["points"]:
        x, mean, low, _ = _band(
            [load_run(point["run_dir"])], "env_steps", "episode_return", spread="std"
        )
        bands.append(
            {
                "label": _point_label(point["overrides"], short),
                "env_steps": x,
                "mean": mean,
                "std": mean - low,
                "final_return": _number(point, "final_return_mean"),
            }
        )
    return bands


def _number(point: dict, key: str) -> float:
    value = point.get(key)
    return math.nan if value is None else float(value)


def single_key_panel(sweep: dict) -> dict | None:
    """Final return against the one key a sweep varies, sorted by its value: {"key", "x",
    "ticks", "mean", "std", "order", "log"}; None when it varies another number of keys.

    Numeric values are the x values ("ticks" None); others (names, booleans) are drawn at
    0, 1, ... with "ticks" their text. "order" maps the rows back to point indices.
    """
    points = sweep["points"]
    keys = list(dict.fromkeys(k for p in points for k in p["overrides"]))
    varied = [
        k for k in keys if len({json.dumps(p["overrides"].get(k), default=str) for p in points}) > 1
    ]
    if len(varied) != 1:
        return None
    key = varied[0]
    values = [p["overrides"].get(key) for p in points]
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    order = sorted(range(len(points)), key=lambda i: values[i] if numeric else str(values[i]))
    x = np.array([values[i] if numeric else n for n, i in enumerate(order)], dtype=float)
    # A log axis only for positive values over more than a decade (e.g. learning rates);
    # the tolerance keeps a decade in floats (0.003 / 0.0003 > 10) linear.
    log = bool(numeric and (x > 0).all() and x.max() / x.min() > 10 * (1 + 1e-9))
    return {
        "key": key,
        "x": x,
        "ticks": None if numeric else [_text(values[i]) for i in order],
        "mean": np.array([_number(points[i], "final_return_mean") for i in order]),
        "std": np.array([_number(points[i], "final_return_std") for i in order]),
        "order": order,
        "log": log,
    }


def _draw_bands(ax, bands: list[dict], best: int | None, plt) -> None:
    """One curve and band per point: labelled up to MAX_LEGEND_POINTS, else coloured by final
    return with a colour bar (64 labels would bury the plot) and only the best one named."""
    many = len(bands) > MAX_LEGEND_POINTS
    if many:
        finals = np.array([b["final_return"] for b in bands])
        finite = finals[np.isfinite(finals)]
        norm = plt.Normalize(*(finite.min(), finite.max()) if finite.size else (0, 1))
        cmap = plt.get_cmap("viridis")
    for i, band in enumerate(bands):
        is_best = i == best
        label = f"{band['label']} (best)" if is_best else band["label"]
        style: dict[str, Any] = {"lw": 2.5 if is_best else 1.0, "zorder": 3 if is_best else 2}
        if many:
            final = band["final_return"]
            # Crimson, off the colormap, so the best curve stands out of 64 others.
            style["color"] = (
                "crimson" if is_best else cmap(norm(final)) if np.isfinite(final) else "grey"
            )
            label = label if is_best else None
        x, mean, std = band["env_steps"], band["mean"], band["std"]
        (line,) = ax.plot(x, mean, label=label, **style)
        ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.12)
    if many:
        plt.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="final return")
    if not many:
        ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    elif best is not None:
        ax.legend(fontsize="small")
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode return (mean ± std over seeds)")
    ax.grid(alpha=0.3)


def _draw_panel(ax, panel: dict, best: int | None) -> None:
    ax.errorbar(panel["x"], panel["mean"], yerr=panel["std"], marker="o", capsize=3)
    if best is not None:
        row = panel["order"].index(best)
        ax.plot(
            panel["x"][row], panel["mean"][row], "*", ms=16, color="crimson", label="best", zorder=3
        )
        ax.legend(fontsize="small")
    if panel["log"]:
        ax.set_xscale("log")
    if panel["ticks"] is not None:
        ax.set_xticks(panel["x"], panel["ticks"])
    ax.set_xlabel(panel["key"])
    ax.set_ylabel("final return (mean ± std over seeds)")
    ax.grid(alpha=0.3)


def plot_sweep(sweep_dir: str | Path, out: str | Path | None = None) -> Path:
    """Draw a sweep directory's curves (and its single-key panel); save a PNG, by default
    SWEEP_DIR/sweep.png."""
    plt = _pyplot()
    sweep = load_sweep(sweep_dir)
    bands, panel = sweep_bands(sweep), single_key_panel(sweep)
    fig, axes = plt.subplots(1, 2 if panel else 1, figsize=(15 if panel else 9, 4.5), squeeze=False)
    _draw_bands(axes[0, 0], bands, sweep["best"], plt)
    if panel:
        _draw_panel(axes[0, 1], panel, sweep["best"])
    fig.tight_layout()
    return _save(fig, Path(sweep_dir) / "sweep.png" if out is None else out)
