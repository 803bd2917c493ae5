#!/usr/bin/env python
"""Host-env speed: training SPS at each pipeline.lag (and pipeline.env_groups), interleaved,
against the env's own random-action loop at the same number of envs, with where each
run's time went.

    python scripts/bench_host.py                                  # ppo_gymnasium_cartpole
    python scripts/bench_host.py --config ppo_gymnasium_cartpole --lags 0,1 --repeats 5
    python scripts/bench_host.py --lags 1 --groups 1,2            # env groups' overlap
    python scripts/bench_host.py --override env.num_envs=16 --json host.json
    python scripts/bench_host.py --lags 1 --cpu-dispatch inline,async  # JAX's CPU dispatch
    python scripts/bench_host.py --config ppo_halfcheetah --variant "threads=" \
        --variant "processes=pipeline.actor_processes=true;pipeline.actor_threads=2"

Each round runs, in turn: the env's random loop (its `step` with sampled actions, the
ceiling any trainer of that env can reach), then one training run per setting. Training
SPS is the executor's own (env steps after the first round, whose compiles it leaves
out). The profile of a run is the learner's time learning, and the slowest actor's time
in env.step, in the policy (dispatching its calls, and waiting for their results: their
compute and transfer, `host/groups.py`'s ActorSeconds) and in its rounds in all. At lag
0 the two sides take turns, so a round costs their sum; at lag >= 1 they overlap, so the
speedup over lag 0 is bounded by (actor + learner) / max(actor, learner), measured at lag
0 in the same round: "of the overlap bound" is the speedup over that bound. That bound
gives each side a core of its own; the CPU sets another: "cores busy" is the CPU seconds
of the run's processes (its actor processes too) per second, and "CPU bound" the SPS at
which its CPU per step would keep every core busy, as a share of the random loop
(`jaxrl_async/host/round_times.py`). Medians with min and max over the rounds;
`python scripts/harness.py table` puts --json's table into docs/performance.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import harness  # beside this script in scripts/

import jaxrl_async
from jaxrl_async._xla_flags import ASYNC_DISPATCH_VAR
from jaxrl_async.host.executor import train_host
from jaxrl_async.host.random_play import random_loop_sps


def train_once(name: str, overrides: list[str], lag: int, groups: int = 1) -> dict:
    settings = [f"pipeline.lag={lag}", f"pipeline.env_groups={groups}", "train.progress=false"]
    config = jaxrl_async.load_config(name, [*overrides, *settings])
    result = train_host(config)
    keys = ("sps", "final_return", "policy_lag", "learner_wait_seconds", "learn_seconds")
    keys += ("actor_env_seconds", "actor_policy_seconds", "actor_dispatch_seconds")
    keys += ("actor_round_seconds",)
    keys += ("cores_busy", "cores", "cpu_bound_sps")
    keys += ("train_seconds", "env_steps")
    return {k: result[k] for k in keys}


DISPATCH = {"inline": "false", "async": "true"}  # --cpu-dispatch: ASYNC_DISPATCH_VAR's values
_CHILD = (
    "import json, sys; sys.path.insert(0, sys.argv[1]); import bench_host; "
    "print(json.dumps(bench_host.train_once(sys.argv[2], json.loads(sys.argv[3]), "
    "int(sys.argv[4]), int(sys.argv[5]))))"
)


def train_in_child(name: str, overrides: list[str], lag: int, groups: int, dispatch: str) -> dict:
    """`train_once` in a fresh process whose JAX dispatches CPU computations as `dispatch`
    says (a process-wide setting, fixed when JAX makes its CPU client)."""
    here = Path(__file__).resolve().parent
    env = {ASYNC_DISPATCH_VAR: DISPATCH[dispatch]}
    return harness.child(_CHILD, here, name, json.dumps(overrides), lag, groups, env=env)


def _waiting(run: dict) -> float:
    """The slowest actor's seconds waiting for its policy's results (compute, transfer)."""
    return run["actor_policy_seconds"] - run["actor_dispatch_seconds"]


def overlap_shares(runs: list[dict], sequential: list[dict]) -> list[float]:
    """Each round's speedup over the sequential run (lag 0, its round's) as a share of the
    bound its breakdown sets: (actor + learner) / max(actor, learner), the actor's whole
    round and the learner's learning as lag 0 measured them."""
    shares = []
    for run, base in zip(runs, sequential, strict=True):
        actor, learner = base["actor_round_seconds"], base["learn_seconds"]
        bound = (actor + learner) / max(actor, learner)
        shares.append(run["sps"] / base["sps"] / bound)
    return shares


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("--config", default="ppo_gymnasium_cartpole")
    p.add_argument("--override", action="append", default=[], help="section.key=value")
    p.add_argument("--steps", type=int, default=65_536, help="train.total_steps of each run")
    p.add_argument("--lags", default="0,1")
    p.add_argument("--groups", default="1", help="pipeline.env_groups values, e.g. 1,2")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        help="NAME=key=value;key=value: settings compared side by side (each a row per lag)",
    )
    p.add_argument("--random-seconds", type=float, default=5.0)
    p.add_argument(
        "--cpu-dispatch",
        default="inline",
        help="JAX's CPU computations inline (a host run's default) and/or async, e.g. inline,async",
    )
    args = p.parse_args(argv)
    lags = [int(x) for x in args.lags.split(",")]
    groups = [int(x) for x in args.groups.split(",")]
    dispatches = args.cpu_dispatch.split(",")
    if not set(dispatches) <= set(DISPATCH):
        p.error(f"--cpu-dispatch takes {', '.join(DISPATCH)}, got {args.cpu_dispatch}")
    variants = dict(_variant(v) for v in args.variant) or {"": []}
    names = {
        (lag, g, d, v): (f"{v}, " if v else "")
        + f"lag {lag}"
        + ("" if groups == [1] else f", {g} env groups")
        + ("" if dispatches == ["inline"] else f", {d} dispatch")
        for v in variants
        for d in dispatches
        for lag in lags
        for g in groups
    }
    overrides = [*args.override, f"train.total_steps={args.steps}"]
    config = jaxrl_async.load_config(args.config, overrides)
    seconds = args.random_seconds
    programs = {
        "random loop": lambda _: {"sps": random_loop_sps(config.env, seconds, config.train.seed)}
    }
    for (lag, g, d, v), name in names.items():
        programs[name] = lambda _, lag=lag, g=g, d=d, v=v: train_in_child(
            args.config, [*overrides, *variants[v]], lag, g, d
        )
    runs = harness.interleave(programs, args.repeats)
    loop = (
        "EnvPool's pool through the adapter's same-step shim"
        if config.env.name.startswith("envpool:")
        else "Gymnasium sync vector env"
    )
    rows = [
        [f"random loop ({loop}, no policy)", harness.cell(harness.of(runs["random loop"], "sps"))]
    ]
    rows[0] += ["1", "-", "-", "-", "-", "-", "-", "-", "-", "-"]
    first = next(iter(names.values()))
    for (lag, g, d, v), name in names.items():
        rs = runs[name]
        rows.append(
            [
                name,
                harness.cell(harness.of(rs, "sps")),
                harness.cell(harness.ratios(rs, runs["random loop"]), ".2f"),
                harness.cell(harness.of(rs, "actor_env_seconds"), ".1f"),
                harness.cell(harness.of(rs, "actor_dispatch_seconds"), ".1f"),
                harness.cell([_waiting(r) for r in rs], ".1f"),
                harness.cell(harness.of(rs, "actor_round_seconds"), ".1f"),
                harness.cell(harness.of(rs, "learn_seconds"), ".1f"),
                "1" if name == first else harness.cell(harness.ratios(rs, runs[first]), ".2f"),
                _of_bound(runs, name, None if lag == 0 else names.get((0, g, d, v))),
                harness.cell(harness.of(rs, "cores_busy"), ".2f"),
                harness.cell(_cpu_bound_shares(rs, runs["random loop"]), ".2f"),
            ]
        )
    columns = ["run", "training SPS", "of the random loop", "actor env.step s"]
    columns += ["policy dispatch s", "policy results s", "actor round s", "learner learn s"]
    columns += [f"ratio to {first}", "of the overlap bound"]
    columns += [f"cores busy (of {runs[first][0]['cores']})", "CPU bound, of the random loop"]
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


def _cpu_bound_shares(runs: list[dict], loops: list[dict]) -> list[float]:
    """Each run's CPU bound (the SPS at which its CPU per step fills every core) as a
    share of its round's random loop: the most any overlap could reach on this machine."""
    return [r["cpu_bound_sps"] / loop["sps"] for r, loop in zip(runs, loops, strict=True)]


def _variant(text: str) -> tuple[str, list[str]]:
    """(name, overrides) of a --variant NAME=key=value;key=value (none after NAME=)."""
    name, _, settings = text.partition("=")
    return name, [s for s in settings.split(";") if s]


def _of_bound(runs: dict, name: str, sequential: str | None) -> str:
    """The overlap-bound cell of run `name` against `sequential`, the lag-0 run with its
    env groups ("-" where there is none: lag 0 itself, or no lag 0 measured)."""
    if sequential is None:
        return "-"
    return harness.cell(overlap_shares(runs[name], runs[sequential]), ".2f")


if __name__ == "__main__":
    sys.exit(main())
