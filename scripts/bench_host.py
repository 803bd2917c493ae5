#!/usr/bin/env python
"""Host-env speed: training SPS at each pipeline.lag, interleaved, against the env's own
random-action loop at the same number of envs, with where each run's time went.

    python scripts/bench_host.py                                  # ppo_gymnasium_cartpole
    python scripts/bench_host.py --config ppo_gymnasium_cartpole --lags 0,1 --repeats 5
    python scripts/bench_host.py --override env.num_envs=16 --json host.json

Each repeat runs, in turn: the env's random loop (its `step` with sampled actions, the
ceiling any trainer of that env can reach), then one training run per lag. Training SPS
is the executor's own (env steps after the first round, whose compiles it leaves out).
The profile of a run is the learner thread's time waiting for rounds and learning, and
the slowest actor's time in env.step and in the policy: at lag 0 the two sides take
turns, so a round costs their sum; at lag >= 1 they overlap, so the bound on the speedup
is (actor + learner) / max(actor, learner). Medians with min and max over the repeats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import jaxrl_async
from jaxrl_async.host import make_host_env
from jaxrl_async.host.executor import train_host


def random_loop_sps(config, seconds: float) -> float:
    """Env steps per second of the env's own vector loop with random actions: no policy
    and no adapter (the vector env the adapter wraps, stepped directly: Gymnasium's, or
    an EnvPool with its same-step resets)."""
    env = make_host_env(config.env.name, config.env.num_envs, **config.env.kwargs)
    vec = env.env
    try:
        vec.reset(seed=config.train.seed)
        vec.action_space.seed(config.train.seed)
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            vec.step(vec.action_space.sample())
            steps += env.num_envs
        return steps / (time.perf_counter() - start)
    finally:
        env.close()


def train_once(name: str, overrides: list[str], lag: int) -> dict:
    config = jaxrl_async.load_config(
        name, [*overrides, f"pipeline.lag={lag}", "train.progress=false"]
    )
    result = train_host(config)
    keys = ("sps", "final_return", "policy_lag", "learner_wait_seconds", "learn_seconds")
    keys += ("actor_env_seconds", "actor_policy_seconds", "train_seconds", "env_steps")
    return {k: result[k] for k in keys}


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="ppo_gymnasium_cartpole")
    p.add_argument("--override", action="append", default=[], help="section.key=value")
    p.add_argument("--steps", type=int, default=65_536, help="train.total_steps of each run")
    p.add_argument("--lags", default="0,1")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--random-seconds", type=float, default=5.0)
    p.add_argument("--json", help="write the result here")
    args = p.parse_args(argv)
    lags = [int(x) for x in args.lags.split(",")]
    overrides = [*args.override, f"train.total_steps={args.steps}"]
    config = jaxrl_async.load_config(args.config, overrides)
    runs: dict[str, list[dict]] = {f"lag{lag}": [] for lag in lags}
    random_sps: list[float] = []
    for repeat in range(args.repeats):
        random_sps.append(random_loop_sps(config, args.random_seconds))
        print(f"repeat {repeat}: random loop {random_sps[-1]:,.0f} SPS", flush=True)
        for lag in lags:
            run = train_once(args.config, overrides, lag)
            runs[f"lag{lag}"].append(run)
            print(
                f"repeat {repeat}: lag {lag} {run['sps']:,.0f} SPS "
                f"(actor env {run['actor_env_seconds']:.1f}s, policy "
                f"{run['actor_policy_seconds']:.1f}s; learner learn {run['learn_seconds']:.1f}s, "
                f"wait {run['learner_wait_seconds']:.1f}s), final return {run['final_return']}",
                flush=True,
            )
    summary = {"random_loop_sps": spread(random_sps)}
    for name, rs in runs.items():
        summary[name] = {k: spread([r[k] for r in rs]) for k in ("sps", "learn_seconds")}
        summary[name]["actor_seconds"] = spread(
            [r["actor_env_seconds"] + r["actor_policy_seconds"] for r in rs]
        )
        summary[name]["of_random_loop"] = spread(
            [r["sps"] / s for r, s in zip(rs, random_sps, strict=True)]
        )
    if len(lags) > 1:
        base = runs[f"lag{lags[0]}"]
        for lag in lags[1:]:
            ratios = [r["sps"] / b["sps"] for r, b in zip(runs[f"lag{lag}"], base, strict=True)]
            summary[f"lag{lag}_over_lag{lags[0]}"] = spread(ratios)
    result = {
        "command": " ".join(["python scripts/bench_host.py", *(argv or sys.argv[1:])]),
        "config": args.config,
        "overrides": overrides,
        "num_envs": config.env.num_envs,
        "runs": runs,
        "random_loop_sps": random_sps,
        "summary": summary,
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
