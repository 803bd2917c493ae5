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
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from jaxrl_async._xla_flags import SCHEDULER_FLAG
from jaxrl_async.build import build_pipeline
from jaxrl_async.config import Config, load_config
from jaxrl_async.errors import UserError
from jaxrl_async.profile import PROFILE_OVERRIDES, profile_config
from jaxrl_async.profile import table as profile_table
from jaxrl_async.trainer import configure_compile_cache, train

BENCH_OVERRIDES = ("pipeline.rollout_len=128", "agent.num_minibatches=4", "train.progress=false")
ON_POLICY_ONLY = ("pipeline.rollout_len", "agent.num_minibatches")  # PPO's reference batch
BENCH_OWNED = ("env.num_envs", "train.total_steps")  # set per measurement by the bench
_START = time.perf_counter()
_LABEL = ""


def log(message: str) -> None:
    """A progress line on stderr, so a long bench shows it is alive."""
    prefix = f"[bench{' ' + _LABEL if _LABEL else ''} {time.perf_counter() - _START:6.1f}s]"
    print(f"{prefix} {message}", file=sys.stderr, flush=True)


def scheduler_setting(flags: str) -> str | None:
    """'true'/'false' as XLA_FLAGS sets the concurrency-optimized scheduler (last wins), or None."""
    found = re.findall(re.escape(SCHEDULER_FLAG) + r"=(\w+)", flags)
    return found[-1].lower() if found else None


def with_scheduler(flags: str, value: str) -> str:
    kept = re.sub(re.escape(SCHEDULER_FLAG) + r"(=\S*)?", "", flags).split()
    return " ".join([*kept, f"{SCHEDULER_FLAG}={value}"])


def machine_info() -> dict:
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    flags = os.environ.get("XLA_FLAGS", "")
    return {"jax_version": jax.__version__, "devices": [str(d) for d in jax.devices()],
            "xla_flags": flags, "scheduler": scheduler_setting(flags) or "xla default",
            "cpu_count": os.cpu_count(), "cpu_affinity": affinity,
            "python": sys.version.split()[0]}


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def calibrated_loop(body, carry, seconds: float):
    """`body` (carry -> carry) looped on device in one compiled program with its carry
    donated; returns (timed, iterations, compile seconds): `timed()` runs `iterations`
    of the body, sized to take about `seconds`, and returns its wall time.

    The iteration count is an argument, not a shape: one compile serves calibration and
    timing. `timed.carry()` is the carry as the last call left it."""

    def run(carry, iterations):
        return jax.lax.fori_loop(0, iterations, lambda _, c: body(c), carry)

    start = time.perf_counter()
    compiled = jax.jit(run, donate_argnums=0).lower(carry, np.int32(1)).compile()
    compile_seconds = time.perf_counter() - start

    def timed(iterations: int) -> float:
        nonlocal carry
        start = time.perf_counter()
        carry = jax.block_until_ready(compiled(carry, np.int32(iterations)))
        return time.perf_counter() - start

    timed(1)  # first call allocates
    iterations, elapsed = 1, timed(1)
    while elapsed < seconds / 5:  # calibrate on a fifth of the budget, then size the timed calls
        iterations = max(2 * iterations,
                         math.ceil(iterations * seconds / 5 / max(elapsed, 1e-6)))
        elapsed = timed(iterations)
    iterations = max(1, round(iterations * seconds / elapsed))

    def timed_calls() -> float:
        return timed(iterations)

    timed_calls.carry = lambda: carry
    return timed_calls, iterations, compile_seconds


def _timed_loop(body, carry, seconds: float, repeats: int, steps_per_iteration: int) -> dict:
    """Env steps per second of `body` (carry -> carry, `steps_per_iteration` env steps)
    looped on device (`calibrated_loop`), compile excluded."""
    timed, iterations, compile_seconds = calibrated_loop(body, carry, seconds)
    steps = iterations * steps_per_iteration
    times = [timed() for _ in range(repeats)]
    return {"sps": [steps / t for t in times], "seconds": times,
            "iterations_per_call": iterations, "env_steps_per_call": steps,
            "compile_seconds": compile_seconds, "carry": timed.carry()}


def measure_ceiling(config: Config, seconds: float, repeats: int) -> dict:
    """Env steps per second of `pipeline.rollout` alone (env steps and the policy's forward
    pass), looped on device, compile excluded."""
    configure_compile_cache(config.train.compile_cache)
    num_envs, rollout_len = config.env.num_envs, config.pipeline.rollout_len
    pipeline, _ = build_pipeline(config)

    def body(carry):
        env_state, obs, memory, key, episodes, params = carry
        key, rollout_key = jax.random.split(key)
        env_state, obs, memory, _, stats = pipeline.rollout(params, env_state, obs, memory,
                                                            rollout_key)
        return env_state, obs, memory, key, episodes + stats["episodes"], params

    start = time.perf_counter()
    key = jax.random.key(config.train.seed, impl=config.prng_impl)
    state = jax.block_until_ready(jax.jit(pipeline.init)(key))
    init_seconds = time.perf_counter() - start
    carry = (state.env_state, state.obs, state.memory, state.key, jax.numpy.int32(0),
             state.learner.params)
    out = _timed_loop(body, carry, seconds, repeats, rollout_len * num_envs)
    episodes = int(out.pop("carry")[4])
    return {**out, "rollouts_per_call": out["iterations_per_call"],
            "init_seconds": init_seconds,  # compiling and running pipeline.init
            "episodes": episodes}


def measure_env_only(config: Config, seconds: float, repeats: int, direct: bool = False) -> dict:
    """Env steps per second of the env alone under uniformly random actions, looped on
    device: as the trainer steps it (adapter, episode statistics, vmap), or with
    `direct`, the suite's own API vmapped (the adapter's `direct`), for the overhead of
    the adapter. Both draw their actions from the adapter's action space."""
    from jaxrl_async import envs as envs_lib

    configure_compile_cache(config.train.compile_cache)
    num_envs, steps = config.env.num_envs, config.pipeline.rollout_len
    env, params = envs_lib.resolve(config.env)
    space = env.action_space(params)
    sample = jax.vmap(space.sample)
    split = jax.vmap(jax.random.split)
    if direct:
        suite, _, env_id = config.env.name.partition(":")
        reset_one, step_one = envs_lib.suites.adapter(suite).direct(env_id, **config.env.kwargs)
        reset, step = jax.vmap(reset_one), jax.vmap(step_one)
    else:
        batched = envs_lib.make_batched(env)
        reset = lambda keys: batched.reset(keys, params)[1]  # noqa: E731
        step = lambda keys, state, action: batched.step(keys, state, action, params)[1]  # noqa: E731

    def body(carry):
        def one(_, carry):
            state, keys = carry
            keys = split(keys)
            action_keys, step_keys = keys[:, 0], keys[:, 1]
            return step(step_keys, state, sample(action_keys)), action_keys

        return jax.lax.fori_loop(0, steps, one, carry)

    keys = jax.random.split(jax.random.key(config.train.seed), num_envs)
    carry = (jax.jit(reset)(keys), keys)
    out = _timed_loop(body, carry, seconds, repeats, steps * num_envs)
    out.pop("carry")
    return out


def measure_train(make_config, num_envs: int, seconds: float, repeats: int, min_updates: int,
                  updates: int | None, sps_guess: float) -> dict:
    """`train()` SPS; the number of updates is sized so one run trains for about `seconds`.

    A run far off that target (the guess was wrong) resizes the next and is kept
    only in `discarded`; the kept runs all have the same number of updates.
    """
    probe = make_config(num_envs, 1 << 40)
    batch = probe.batch_size
    # Whole host calls, as train() groups them, so no run ends up with one update per call.
    ticks = max(1, probe.train.log_every // batch)

    def size(sps: float) -> int:
        n = max(min_updates, round(seconds * sps / batch))
        return n if n <= ticks else max(ticks, round(n / ticks) * ticks)

    n = updates or size(sps_guess)
    runs: list[dict] = []
    discarded: list[dict] = []
    while len(runs) < repeats:
        log(f"envs={num_envs}: train {n} updates ({n * batch:,} steps)")
        summary = train(make_config(num_envs, n * batch), run_dir=None).summary
        run = {key: summary[key] for key in ("sps", "compile_seconds", "train_seconds",
                                             "updates", "env_steps", "final_return")}
        log(f"envs={num_envs}: train {summary['sps']:,.0f} SPS in {summary['train_seconds']:.2f}s"
            f" (compile {summary['compile_seconds']:.2f}s)")
        resized = size(summary["sps"])
        off_target = not seconds / 2 <= summary["train_seconds"] <= 2 * seconds
        if updates is None and not runs and off_target and resized != n and len(discarded) < 3:
            discarded.append(run)
            n = resized
            continue
        runs.append(run)
    column = {key: [r[key] for r in runs] for key in ("sps", "compile_seconds", "train_seconds")}
    return {**column, "updates": n, "env_steps": n * batch, "runs": runs, "discarded": discarded}


def has_direct(env_name: str) -> bool:
    """Whether `env_name` is a suite env whose adapter can step the suite's own API."""
    from jaxrl_async.envs import suites

    suite = env_name.partition(":")[0]
    return suite in suites.SUITES and hasattr(suites.adapter(suite), "direct")


def bench_overrides(name: str, user: list[str]) -> list[str]:
    """BENCH_OVERRIDES for config `name`: an off-policy agent keeps its own rollout (its
    length sets the agent's updates per env step) and has no minibatches."""
    agent = load_config(name, user).agent
    if getattr(type(agent), "DATA", "trajectory") != "replay":
        return list(BENCH_OVERRIDES)
    return [o for o in BENCH_OVERRIDES if o.split("=", 1)[0] not in ON_POLICY_ONLY]


def run_bench(args) -> dict:
    """Measure every env count in this process (the XLA flags are whatever it started with)."""
    user = list(args.set or [])
    for item in user:
        if item.split("=", 1)[0] in BENCH_OWNED:
            raise UserError(f"--set {item}: {' and '.join(BENCH_OWNED)} are set by the bench")
    base = [*bench_overrides(args.config, user),
            f"train.compile_cache={str(args.compile_cache).lower()}",
            *([f"env.name={args.env}"] if args.env else []), *user]

    def make_config(num_envs: int, total_steps: int) -> Config:
        return load_config(args.config, [*base, f"env.num_envs={num_envs}",
                                         f"train.total_steps={total_steps}"])

    # Fail on a bad config before spending minutes measuring; the ceiling ignores total_steps.
    configs = {n: make_config(n, 1 << 40) for n in args.envs}
    info = machine_info()
    log(f"jax {info['jax_version']} on {info['devices']}, XLA_FLAGS={info['xla_flags']!r}")
    results = []
    last_train_sps = None
    for num_envs in args.envs:
        log(f"envs={num_envs}: ceiling (compile, calibrate, {args.repeats} timed calls)")
        ceiling = measure_ceiling(configs[num_envs], args.seconds, args.repeats)
        log(f"envs={num_envs}: ceiling {statistics.median(ceiling['sps']):,.0f} SPS (compile "
            f"{ceiling['compile_seconds']:.2f}s, {ceiling['rollouts_per_call']} rollouts/call)")
        row = {"envs": num_envs, "ceiling": ceiling}
        if args.env:
            row["env_only"] = measure_env_only(configs[num_envs], args.seconds, args.repeats)
            log(f"envs={num_envs}: env alone {statistics.median(row['env_only']['sps']):,.0f} SPS")
            if has_direct(args.env):
                row["direct"] = measure_env_only(configs[num_envs], args.seconds, args.repeats,
                                                 direct=True)
                log(f"envs={num_envs}: suite API alone "
                    f"{statistics.median(row['direct']['sps']):,.0f} SPS")
        # Training reaches 0.1-0.3 of the ceiling and grows slower than it with more envs.
        guess = 0.3 * statistics.median(ceiling["sps"])
        if last_train_sps is not None:
            guess = min(guess, 1.5 * last_train_sps)
        trained = measure_train(make_config, num_envs, args.seconds, args.repeats,
                                args.min_updates, args.updates, guess)
        last_train_sps = statistics.median(trained["sps"])
        results.append({**row, "train": trained})
    config = configs[args.envs[0]]
    settings = {"config": args.config, "env": config.env.name, "overrides": base, "envs": args.envs,
                "repeats": args.repeats, "seconds": args.seconds,
                "compile_cache": args.compile_cache, "rollout_len": config.pipeline.rollout_len,
                "num_minibatches": getattr(config.agent, "num_minibatches", None)}
    return {"meta": info, "settings": settings, "results": results}


def run_profile(args) -> list[dict]:
    """`--profile`: the phase shares of each config in `--config` (comma-separated), at its
    own env count or at each of `--envs`."""
    base = [*PROFILE_OVERRIDES, "train.progress=false",
            f"train.compile_cache={str(args.compile_cache).lower()}",
            *([f"env.name={args.env}"] if args.env else []), *(args.set or [])]
    # Every config is loaded (and any error reported) before the first is measured.
    configs = [load_config(name, [*base, *([f"env.num_envs={n}"] if n else [])])
               for name in args.config.split(",") for n in args.envs or [None]]
    rows = []
    for config in configs:
        log(f"profile {config.name} ({config.env.num_envs} envs x {config.pipeline.rollout_len})")
        row = profile_config(config, args.seconds, args.repeats, calibrated_loop)
        tick = statistics.median(row["seconds_per_tick"]["tick"])
        log(f"profile {config.name}: tick {1e3 * tick:.3g} ms, "
            + ", ".join(f"{k} {100 * v:.0f}%" for k, v in row["shares"].items()))
        rows.append(row)
    return rows


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
    return "\n".join([
        f"- jax {m['jax_version']}, python {m['python']}, devices: {', '.join(m['devices'])}",
        f"- CPUs: {m['cpu_count']} (usable by this process: {m['cpu_affinity']})",
        f"- XLA_FLAGS: `{m['xla_flags']}` (concurrency-optimized scheduler: {m['scheduler']})",
        f"- config {s['config']}, env {s.get('env', '?')}, rollout_len {s['rollout_len']}, "
        f"num_minibatches "
        f"{s['num_minibatches']}, {s['repeats']} repeats of ~{s['seconds']:g}s, "
        f"compile cache {'on' if s['compile_cache'] else 'off'}",
    ])


def table(bench: dict) -> str:
    rows = bench["results"]
    env_only = any("env_only" in r for r in rows)
    direct = any("direct" in r for r in rows)
    head = ["envs", *(["env alone SPS"] if env_only else []),
            *(["suite API SPS", "adapter overhead"] if direct else []),
            "ceiling SPS", "train SPS", "train/ceiling", "train compile s"]
    lines = ["| " + " | ".join(head) + " |", "|" + " ---: |" * len(head)]
    for r in rows:
        ceiling, trained = r["ceiling"]["sps"], r["train"]["sps"]
        cells = [str(r["envs"])]
        if env_only:
            cells.append(_cell(r["env_only"]["sps"]) if "env_only" in r else "-")
        if direct:
            if "direct" in r:
                overhead = 1 - (statistics.median(r["env_only"]["sps"])
                                / statistics.median(r["direct"]["sps"]))
                cells += [_cell(r["direct"]["sps"]), f"{100 * overhead:.0f}%"]
            else:
                cells += ["-", "-"]
        ratio = statistics.median(trained) / statistics.median(ceiling)
        cells += [_cell(ceiling), _cell(trained), f"{ratio:.2f}",
                  f"{statistics.median(r['train']['compile_seconds']):.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def comparison(runs: dict) -> str:
    """Medians of each scheduler setting side by side, with the ratio false/true."""
    on, off = runs["true"]["results"], runs["false"]["results"]
    lines = ["| envs | ceiling SPS on | ceiling SPS off | train SPS on | train SPS off "
             "| train off/on | compile s on | compile s off |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for a, b in zip(on, off):
        med = {k: (statistics.median(a[k]["sps"]), statistics.median(b[k]["sps"]))
               for k in ("ceiling", "train")}
        comp = [statistics.median(x["train"]["compile_seconds"]) for x in (a, b)]
        lines.append(f"| {a['envs']} | {_si(med['ceiling'][0])} | {_si(med['ceiling'][1])} | "
                     f"{_si(med['train'][0])} | {_si(med['train'][1])} | "
                     f"{med['train'][1] / med['train'][0]:.2f} | {comp[0]:.2f} | {comp[1]:.2f} |")
    return "\n".join(lines)


def run_children(args, settings: list[str]) -> dict:
    """Re-run this bench in a fresh process per scheduler setting; their JSON by setting."""
    runs = {}
    with tempfile.TemporaryDirectory(prefix="jaxrl_async_bench_") as tmp:
        for value in settings:
            out = Path(tmp) / f"{value}.json"
            flags = with_scheduler(os.environ.get("XLA_FLAGS", ""), value)
            env = {**os.environ, "XLA_FLAGS": flags}
            cmd = [sys.executable, "-m", "jaxrl_async.bench",
                   "--envs", ",".join(map(str, args.envs)), "--repeats", str(args.repeats),
                   "--seconds", str(args.seconds),
                   "--min-updates", str(args.min_updates), "--config", args.config,
                   *(["--env", args.env] if args.env else []),
                   "--json", str(out), "--label", f"scheduler={value}",
                   *(["--compile-cache"] if args.compile_cache else []),
                   *(["--updates", str(args.updates)] if args.updates else []),
                   *(f"--set={item}" for item in args.set or [])]
            log(f"scheduler={value}: subprocess with XLA_FLAGS={env['XLA_FLAGS']!r}")
            proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL)
            if proc.returncode != 0:
                raise ChildFailed(f"scheduler={value} run failed with exit code {proc.returncode}",
                                  proc.returncode)
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
    p = argparse.ArgumentParser(prog="jaxrl-async bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", type=_env_counts, default=None,
                   help="comma-separated env counts (default 4,64,512,2048; with --profile, "
                        "the config's own)")
    p.add_argument("--repeats", type=_positive(int), default=3, help="runs per number (default 3)")
    p.add_argument("--seconds", type=_positive(float), default=3.0,
                   help="target duration of each timed run (default 3)")
    p.add_argument("--min-updates", type=_positive(int), default=4,
                   help="fewest PPO updates in a training run (default 4)")
    p.add_argument("--updates", type=_positive(int), default=None,
                   help="train exactly this many updates instead of sizing runs by --seconds")
    p.add_argument("--config", default="ppo_cartpole",
                   help="shipped config name or YAML path (with --profile, comma-separated)")
    p.add_argument("--profile", action="store_true",
                   help="instead of SPS per env count: the share of a tick spent in rollout, "
                        "returns, update and the rest, per config, each phase timed alone")
    p.add_argument("--env", default=None,
                   help="any registered env (a gymnax id, <suite>:<id>, module:factory): also "
                        "measures the env alone and, for a suite, its own API (the adapter's "
                        "overhead); env.kwargs via --set")
    p.add_argument("--set", action="append", metavar="section.key=value",
                   help="config override, repeatable (e.g. --set agent.hidden_sizes=[8])")
    p.add_argument("--compile-cache", action="store_true",
                   help="use the persistent XLA cache (default off: cold compile times)")
    p.add_argument("--xla-scheduler", choices=("default", "on", "off", "both"), default="default",
                   help="XLA's concurrency-optimized CPU scheduler: as XLA_FLAGS/the project set "
                        "it (default), forced on or off, or both compared (one subprocess each)")
    p.add_argument("--json", type=Path, default=None, help="write the raw numbers here")
    p.add_argument("--label", default="", help=argparse.SUPPRESS)
    return p


def main(argv=None) -> int:
    global _LABEL
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:  # `jaxrl-async bench -- --envs 4`
        argv = argv[1:]
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    _LABEL = args.label
    if args.envs is None and not args.profile:
        args.envs = [4, 64, 512, 2048]
    want = {"on": ["true"], "off": ["false"], "both": ["true", "false"]}.get(args.xla_scheduler)
    current = scheduler_setting(os.environ.get("XLA_FLAGS", ""))
    try:
        if args.profile:
            rows = run_profile(args)
            info = machine_info()
            print(f"- jax {info['jax_version']}, {', '.join(info['devices'])}, CPUs usable: "
                  f"{info['cpu_affinity']}, {args.repeats} repeats of ~{args.seconds:g}s\n\n"
                  + profile_table(rows), flush=True)
            payload = {"meta": info, "profile": rows}
        elif want is None or want == [current]:
            bench = run_bench(args)
            print(header(bench) + "\n\n" + table(bench), flush=True)
            payload = bench
        else:
            runs = run_children(args, want)
            parts = [f"## scheduler={value}\n\n{header(b)}\n\n{table(b)}"
                     for value, b in runs.items()]
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
