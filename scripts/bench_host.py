#!/usr/bin/env python
"""Host-env speed: training SPS at each pipeline.lag, interleaved, against the env's own
random-action loop at the same number of envs, with where each run's time went.

    python scripts/bench_host.py                                  # ppo_gymnasium_cartpole
    python scripts/bench_host.py --config ppo_gymnasium_cartpole --lags 0,1 --repeats 5
    python scripts/bench_host.py --override env.num_envs=16 --json host.json

Each round runs, in turn: the env's random loop (its `step` with sampled actions, the
ceiling any trainer of that env can reach), then one training run per lag. Training SPS
is the executor's own (env steps after the first round, whose compiles it leaves out).
The profile of a run is the learner thread's time waiting for rounds and learning, and
the slowest actor's time in env.step and in the policy: at lag 0 the two sides take
turns, so a round costs their sum; at lag >= 1 they overlap, so the bound on the speedup
is (actor + learner) / max(actor, learner). Medians with min and max over the rounds;
`python scripts/harness.py table` puts --json's table into docs/performance.json.
"""

from __future__ import annotations

import sys
import time

import harness  # beside this script in scripts/

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


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("--config", default="ppo_gymnasium_cartpole")
    p.add_argument("--override", action="append", default=[], help="section.key=value")
    p.add_argument("--steps", type=int, default=65_536, help="train.total_steps of each run")
    p.add_argument("--lags", default="0,1")
    p.add_argument("--random-seconds", type=float, default=5.0)
    args = p.parse_args(argv)
    lags = [int(x) for x in args.lags.split(",")]
    overrides = [*args.override, f"train.total_steps={args.steps}"]
    config = jaxrl_async.load_config(args.config, overrides)
    programs = {"random loop": lambda _: {"sps": random_loop_sps(config, args.random_seconds)}}
    for lag in lags:
        programs[f"lag {lag}"] = lambda _, lag=lag: train_once(args.config, overrides, lag)
    runs = harness.interleave(programs, args.repeats)
    loop = (
        "EnvPool's pool through the adapter's same-step shim"
        if config.env.name.startswith("envpool:")
        else "Gymnasium sync vector env"
    )
    rows = [
        [f"random loop ({loop}, no policy)", harness.cell(harness.of(runs["random loop"], "sps"))]
    ]
    rows[0] += ["1", "-", "-", "-"]
    for lag in lags:
        rs = runs[f"lag {lag}"]
        rows.append(
            [
                f"lag {lag}",
                harness.cell(harness.of(rs, "sps")),
                harness.cell(harness.ratios(rs, runs["random loop"]), ".2f"),
                harness.cell(
                    [r["actor_env_seconds"] + r["actor_policy_seconds"] for r in rs], ".1f"
                ),
                harness.cell(harness.of(rs, "learn_seconds"), ".1f"),
                "1"
                if lag == lags[0]
                else harness.cell(harness.ratios(rs, runs[f"lag {lags[0]}"]), ".2f"),
            ]
        )
    columns = ["run", "training SPS", "of the random loop", "actor s (env + policy)"]
    columns += ["learner learn s", f"ratio to lag {lags[0]}"]
    return harness.report(
        __file__,
        argv,
        columns,
        rows,
        args.json,
        overrides=overrides,
        num_envs=config.env.num_envs,
        runs=runs,
    )


if __name__ == "__main__":
    sys.exit(main())
