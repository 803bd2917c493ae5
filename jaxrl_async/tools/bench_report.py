"""The bench's Markdown tables: SPS per env count, and two scheduler settings compared."""

from __future__ import annotations

import statistics

from jaxrl_async.tools.measure import spread


def _si(x: float) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def _cell(values: list[float]) -> str:
    s = spread(values)
    return f"{_si(s['median'])} [{_si(s['min'])}–{_si(s['max'])}]"


def header(bench: dict) -> str:
    m, s = bench["meta"], bench["settings"]
    return "\n".join(
        [
            f"- jax {m['jax_version']}, python {m['python']}, devices: {', '.join(m['devices'])}",
            f"- CPUs: {m['cpu_count']} (usable by this process: {m['cpu_affinity']})",
            f"- XLA_FLAGS: `{m['xla_flags']}` (concurrency-optimized scheduler: {m['scheduler']})",
            f"- config {s['config']}, env {s.get('env', '?')}, rollout_len {s['rollout_len']}, "
            f"num_minibatches "
            f"{s['num_minibatches']}, {s['repeats']} repeats of ~{s['seconds']:g}s, "
            f"compile cache {'on' if s['compile_cache'] else 'off'}",
        ]
    )


def table(bench: dict) -> str:
    rows = bench["results"]
    env_only = any("env_only" in r for r in rows)
    direct = any("direct" in r for r in rows)
    head = [
        "envs",
        *(["env alone SPS"] if env_only else []),
        *(["suite API SPS", "adapter overhead"] if direct else []),
        "ceiling SPS",
        "train SPS",
        "train/ceiling",
        "train compile s",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + " ---: |" * len(head)]
    for r in rows:
        ceiling, trained = r["ceiling"]["sps"], r["train"]["sps"]
        cells = [str(r["envs"])]
        if env_only:
            cells.append(_cell(r["env_only"]["sps"]) if "env_only" in r else "-")
        if direct:
            if "direct" in r:
                overhead = 1 - (
                    statistics.median(r["env_only"]["sps"]) / statistics.median(r["direct"]["sps"])
                )
                cells += [_cell(r["direct"]["sps"]), f"{100 * overhead:.0f}%"]
            else:
                cells += ["-", "-"]
        ratio = statistics.median(trained) / statistics.median(ceiling)
        cells += [
            _cell(ceiling),
            _cell(trained),
            f"{ratio:.2f}",
            f"{statistics.median(r['train']['compile_seconds']):.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def comparison(runs: dict) -> str:
    """Medians of each scheduler setting side by side, with the ratio false/true."""
    on, off = runs["true"]["results"], runs["false"]["results"]
    lines = [
        "| envs | ceiling SPS on | ceiling SPS off | train SPS on | train SPS off "
        "| train off/on | compile s on | compile s off |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for a, b in zip(on, off):
        med = {
            k: (statistics.median(a[k]["sps"]), statistics.median(b[k]["sps"]))
            for k in ("ceiling", "train")
        }
        comp = [statistics.median(x["train"]["compile_seconds"]) for x in (a, b)]
        lines.append(
            f"| {a['envs']} | {_si(med['ceiling'][0])} | {_si(med['ceiling'][1])} | "
            f"{_si(med['train'][0])} | {_si(med['train'][1])} | "
            f"{med['train'][1] / med['train'][0]:.2f} | {comp[0]:.2f} | {comp[1]:.2f} |"
        )
    return "\n".join(lines)
