"""`jaxrl-async bench`: the env+policy ceiling and full PPO training SPS, per env count.

The ceiling is the rollout the trainer runs (vmapped env steps and the policy's
forward pass) looped on device in one compiled program with its state donated,
and nothing else: no learner, and the trajectory is dropped, so XLA need not
write it out. Training SPS is `train(config).summary["sps"]`. Both exclude
compile time, which is measured separately. Every number is repeated; tables
show the median with [min–max] because these machines are noisy.

XLA reads XLA_FLAGS when its CPU backend starts, so comparing the CPU scheduler
settings (`--xla-scheduler both`) re-runs this module in one subprocess per
setting and merges their JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from jaxrl_async.config.loader import Config, engine_kind, load_config
from jaxrl_async.errors import UserError
from jaxrl_async.tools.bench_report import comparison, header, table
from jaxrl_async.tools.host_profile import host_table, profile_host
from jaxrl_async.tools.measure import (
    TrainBudget,
    calibrated_loop,
    log,
    machine_info,
    measure_ceiling,
    measure_env_only,
    measure_train,
    scheduler_setting,
    set_label,
    with_scheduler,
)
from jaxrl_async.tools.profile import PROFILE_OVERRIDES, profile_config
from jaxrl_async.tools.profile import table as profile_table

HOST_PROFILE_ROUNDS = 32  # rounds a host config's profile times, after the first

__all__ = [
    "BENCH_OVERRIDES",
    "bench_overrides",
    "has_direct",
    "main",
    "scheduler_setting",
    "with_scheduler",
]

BENCH_OVERRIDES = ("pipeline.rollout_len=128", "agent.num_minibatches=4", "train.progress=false")
ON_POLICY_ONLY = ("pipeline.rollout_len", "agent.num_minibatches")  # PPO's reference batch
BENCH_OWNED = ("env.num_envs", "train.total_steps")  # set per measurement by the bench


def has_direct(env_name: str) -> bool:
    """Whether `env_name` is a suite env whose adapter can step the suite's own API."""
    from jaxrl_async.envs import suites

    suite = env_name.partition(":")[0]
    return suite in suites.SUITES and hasattr(suites.adapter(suite), "direct")


def bench_overrides(name: str, user: list[str]) -> list[str]:
    """BENCH_OVERRIDES for config `name`: an off-policy agent keeps its own rollout (its
    length sets the agent's updates per env step) and has no minibatches."""
    if not load_config(name, user).agent.off_policy:
        return list(BENCH_OVERRIDES)
    return [o for o in BENCH_OVERRIDES if o.split("=", 1)[0] not in ON_POLICY_ONLY]


def bench_base(args) -> list[str]:
    """The overrides every measurement shares: the bench's own, the flags', then `--set`'s
    (which may not set what the bench sets per measurement)."""
    user = list(args.set or [])
    for item in user:
        if item.split("=", 1)[0] in BENCH_OWNED:
            raise UserError(f"--set {item}: {' and '.join(BENCH_OWNED)} are set by the bench")
    return [
        *bench_overrides(args.config, user),
        f"train.compile_cache={str(args.compile_cache).lower()}",
        *([f"env.name={args.env}"] if args.env else []),
        *user,
    ]


def measure_ceilings(config: Config, args, num_envs: int) -> dict:
    """The row of one env count before its training run: the ceiling and, with `--env`,
    the env alone (and, for a suite env, the suite's own API alone)."""
    log(f"envs={num_envs}: ceiling (compile, calibrate, {args.repeats} timed calls)")
    ceiling = measure_ceiling(config, args.seconds, args.repeats)
    log(
        f"envs={num_envs}: ceiling {statistics.median(ceiling['sps']):,.0f} SPS (compile "
        f"{ceiling['compile_seconds']:.2f}s, {ceiling['rollouts_per_call']} rollouts/call)"
    )
    row: dict[str, Any] = {"envs": num_envs, "ceiling": ceiling}
    if args.env:
        row["env_only"] = measure_env_only(config, args.seconds, args.repeats)
        log(f"envs={num_envs}: env alone {statistics.median(row['env_only']['sps']):,.0f} SPS")
        if has_direct(args.env):
            row["direct"] = measure_env_only(config, args.seconds, args.repeats, direct=True)
            log(
                f"envs={num_envs}: suite API alone "
                f"{statistics.median(row['direct']['sps']):,.0f} SPS"
            )
    return row


def run_bench(args) -> dict:
    """Measure every env count in this process (the XLA flags are whatever it started with)."""
    base = bench_base(args)

    def make_config(num_envs: int, total_steps: int) -> Config:
        return load_config(
            args.config, [*base, f"env.num_envs={num_envs}", f"train.total_steps={total_steps}"]
        )

    # Fail on a bad config before spending minutes measuring; the ceiling ignores total_steps.
    configs = {n: make_config(n, 1 << 40) for n in args.envs}
    info = machine_info()
    log(f"jax {info['jax_version']} on {info['devices']}, XLA_FLAGS={info['xla_flags']!r}")
    results = []
    last_train_sps = None
    for num_envs in args.envs:
        row = measure_ceilings(configs[num_envs], args, num_envs)
        # Training reaches 0.1-0.3 of the ceiling and grows slower than it with more envs.
        guess = 0.3 * statistics.median(row["ceiling"]["sps"])
        if last_train_sps is not None:
            guess = min(guess, 1.5 * last_train_sps)
        budget = TrainBudget(args.seconds, args.repeats, args.min_updates, args.updates)
        trained = measure_train(make_config, num_envs, budget, guess)
        last_train_sps = statistics.median(trained["sps"])
        results.append({**row, "train": trained})
    config = configs[args.envs[0]]
    settings = {
        "config": args.config,
        "env": config.env.name,
        "overrides": base,
        "envs": args.envs,
        "repeats": args.repeats,
        "seconds": args.seconds,
        "compile_cache": args.compile_cache,
        "rollout_len": config.pipeline.rollout_len,
        "num_minibatches": None if config.agent.off_policy else config.agent.minibatches,
    }
    return {"meta": info, "settings": settings, "results": results}


def run_profile(args) -> list[dict]:
    """`--profile`: the phase shares of each config in `--config` (comma-separated), at its
    own env count or at each of `--envs`."""
    base = [
        *PROFILE_OVERRIDES,
        "train.progress=false",
        f"train.compile_cache={str(args.compile_cache).lower()}",
        *([f"env.name={args.env}"] if args.env else []),
        *(args.set or []),
    ]
    # Every config is loaded (and any error reported) before the first is measured.
    configs = [
        load_config(name, [*base, *([f"env.num_envs={n}"] if n else [])])
        for name in args.config.split(",")
        for n in args.envs or [None]
    ]
    rows = []
    for config in configs:
        log(f"profile {config.name} ({config.env.num_envs} envs x {config.pipeline.rollout_len})")
        if engine_kind(config) == "host":  # no compiled tick: the executor's own times, per round
            rows.append(profile_host(config, HOST_PROFILE_ROUNDS, args.repeats))
            continue
        row = profile_config(config, args.seconds, args.repeats, calibrated_loop)
        tick = statistics.median(row["seconds_per_tick"]["tick"])
        log(
            f"profile {config.name}: tick {1e3 * tick:.3g} ms, "
            + ", ".join(f"{k} {100 * v:.0f}%" for k, v in row["shares"].items())
        )
        rows.append(row)
    return rows


def run_children(args, settings: list[str]) -> dict:
    """Re-run this bench in a fresh process per scheduler setting; their JSON by setting."""
    runs = {}
    with tempfile.TemporaryDirectory(prefix="jaxrl_async_bench_") as tmp:
        for value in settings:
            out = Path(tmp) / f"{value}.json"
            flags = with_scheduler(os.environ.get("XLA_FLAGS", ""), value)
            env = {**os.environ, "XLA_FLAGS": flags}
            cmd = [
                sys.executable,
                "-m",
                "jaxrl_async.tools.bench",
                "--envs",
                ",".join(map(str, args.envs)),
                "--repeats",
                str(args.repeats),
                "--seconds",
                str(args.seconds),
                "--min-updates",
                str(args.min_updates),
                "--config",
                args.config,
                *(["--env", args.env] if args.env else []),
                "--json",
                str(out),
                "--label",
                f"scheduler={value}",
                *(["--compile-cache"] if args.compile_cache else []),
                *(["--updates", str(args.updates)] if args.updates else []),
                *(f"--set={item}" for item in args.set or []),
            ]
            log(f"scheduler={value}: subprocess with XLA_FLAGS={env['XLA_FLAGS']!r}")
            proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL)
            if proc.returncode != 0:
                raise ChildFailed(
                    f"scheduler={value} run failed with exit code {proc.returncode}",
                    proc.returncode,
                )
            runs[value] = json.loads(out.read_text())
    return runs


class ChildFailed(Exception):
    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def _env_counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected positive env counts, got {text!r}")
    return counts


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jaxrl-async bench",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_sizing(p)
    _add_subject(p)
    return p


def _add_sizing(p: argparse.ArgumentParser) -> None:
    """How many measurements, and how long each runs."""
    p.add_argument(
        "--envs",
        type=_env_counts,
        default=None,
        help="comma-separated env counts (default 4,64,512,2048; with --profile, the config's own)",
    )
    p.add_argument("--repeats", type=_positive(int), default=3, help="runs per number (default 3)")
    p.add_argument(
        "--seconds",
        type=_positive(float),
        default=3.0,
        help="target duration of each timed run (default 3)",
    )
    p.add_argument(
        "--min-updates",
        type=_positive(int),
        default=4,
        help="fewest PPO updates in a training run (default 4)",
    )
    p.add_argument(
        "--updates",
        type=_positive(int),
        default=None,
        help="train exactly this many updates instead of sizing runs by --seconds",
    )


def _add_subject(p: argparse.ArgumentParser) -> None:
    """What is measured, under which settings, and where the numbers go."""
    p.add_argument(
        "--config",
        default="ppo_cartpole",
        help="shipped config name or YAML path (with --profile, comma-separated)",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="instead of SPS per env count: the share of a tick spent in rollout, "
        "returns, update and the rest, per config, each phase timed alone",
    )
    p.add_argument(
        "--env",
        default=None,
        help="any registered env (a gymnax id, <suite>:<id>, module:factory): also "
        "measures the env alone and, for a suite, its own API (the adapter's "
        "overhead); env.kwargs via --set",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="section.key=value",
        help="config override, repeatable (e.g. --set agent.hidden_sizes=[8])",
    )
    p.add_argument(
        "--compile-cache",
        action="store_true",
        help="use the persistent XLA cache (default off: cold compile times)",
    )
    p.add_argument(
        "--xla-scheduler",
        choices=("default", "on", "off", "both"),
        default="default",
        help="XLA's concurrency-optimized CPU scheduler: as XLA_FLAGS/the project set "
        "it (default), forced on or off, or both compared (one subprocess each)",
    )
    p.add_argument("--json", type=Path, default=None, help="write the raw numbers here")
    p.add_argument("--label", default="", help=argparse.SUPPRESS)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:  # `jaxrl-async bench -- --envs 4`
        argv = argv[1:]
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    set_label(args.label)
    if args.envs is None and not args.profile:
        args.envs = [4, 64, 512, 2048]
    want = {"on": ["true"], "off": ["false"], "both": ["true", "false"]}.get(args.xla_scheduler)
    current = scheduler_setting(os.environ.get("XLA_FLAGS", ""))
    try:
        if args.profile:
            rows = run_profile(args)
            info = machine_info()
            print(
                f"- jax {info['jax_version']}, {', '.join(info['devices'])}, CPUs usable: "
                f"{info['cpu_affinity']}, {args.repeats} repeats of ~{args.seconds:g}s\n\n"
                + "\n\n".join(
                    table_of(part)
                    for table_of, part in (
                        (profile_table, [r for r in rows if "shares" in r]),
                        (host_table, [r for r in rows if "shares" not in r]),
                    )
                    if part
                ),
                flush=True,
            )
            payload = {"meta": info, "profile": rows}
        elif want is None or want == [current]:
            bench = run_bench(args)
            print(header(bench) + "\n\n" + table(bench), flush=True)
            payload = bench
        else:
            runs = run_children(args, want)
            parts = [
                f"## scheduler={value}\n\n{header(b)}\n\n{table(b)}" for value, b in runs.items()
            ]
            if len(runs) == 2:
                parts.append("## scheduler on vs off (medians)\n\n" + comparison(runs))
            print("\n\n".join(parts), flush=True)
            payload = {"runs": runs}
    except UserError as e:
        print(f"jaxrl-async bench: error: {e}", file=sys.stderr)
        return 2
    except ChildFailed as e:
        print(f"jaxrl-async bench: error: {e}", file=sys.stderr)
        return e.code
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
