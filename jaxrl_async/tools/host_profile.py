"""`jaxrl-async bench --profile` for a host-env config: where a round's time goes.

A host run has no compiled tick to take apart; its executor times itself instead
(`host/round_times.py` RoundTimes, the rounds after the first): the slowest actor's time in
env.step and in the policy (of which dispatching its calls; the rest waits for results), and
the learner's time learning and waiting for rounds.
Each repeat trains `rounds` rounds of the config; the bound on what overlapping actor
and learner can win (lag >= 1 against lag 0) is (actor + learner) / max(actor, learner),
the actor's whole round (env, policy and its own work) against the learner's learning.
That bound gives each side a core of its own; the CPU's is the other bound
(`host/round_times.py`): the cores the run keeps busy, of those it may use, and the SPS
at which its CPU per step would fill them, as a share of the random loop: where that
share is below the loop's, no overlap or actor count reaches the loop on this machine.
"""

from __future__ import annotations

import dataclasses
import statistics

from jaxrl_async.config.loader import Config
from jaxrl_async.tools.plan import actors_words

# Seconds of the env's own random loop measured beside each training run.
RANDOM_SECONDS = 2.0


def profile_host(config: Config, rounds: int, repeats: int) -> dict:
    """The per-round profile of `config` over `repeats` runs of `rounds` rounds each, each
    run after a measure of the env's own random loop (interleaved: SPS / loop SPS)."""
    from jaxrl_async.host.executor import train_host
    from jaxrl_async.host.random_play import random_loop_sps
    from jaxrl_async.host.round_times import ACTOR_TIMES

    steps = (rounds + 1) * config.batch_size  # the first round (its compiles) is left out
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, total_steps=steps))
    loops, runs = [], []
    for _ in range(repeats):
        loops.append(random_loop_sps(config.env, RANDOM_SECONDS, config.train.seed))
        runs.append(train_host(config))
    timed = (*ACTOR_TIMES, "learn_seconds", "learner_wait_seconds")
    per_round = {key.removesuffix("_seconds"): [r[key] / rounds for r in runs] for key in timed}
    actor = statistics.median(per_round["actor_round"])
    learner = statistics.median(per_round["learn"])
    return {
        "config": config.name,
        "envs": config.env.num_envs,
        "rollout_len": config.pipeline.rollout_len,
        "lag": config.pipeline.lag,
        "actor_threads": config.pipeline.actor_threads,
        "actor_processes": config.pipeline.actor_processes,
        "sps": [r["sps"] for r in runs],
        "random_loop_sps": loops,
        "of_random_loop": [r["sps"] / loop for r, loop in zip(runs, loops)],
        "seconds_per_round": per_round,
        "overlap_bound": (actor + learner) / max(actor, learner, 1e-12),
        "cores": runs[0]["cores"],
        "cores_busy": [r["cores_busy"] for r in runs],
        "cpu_bound_of_random_loop": [r["cpu_bound_sps"] / x for r, x in zip(runs, loops)],
    }


def host_table(rows: list[dict]) -> str:
    """Markdown: per config, SPS and each side's milliseconds a round (medians)."""
    lines = [
        "| config | envs x steps | lag | actors | SPS | of the env's random loop "
        "| env step | policy (dispatch) | actor round | learn | learner waits | overlap bound "
        "| cores busy | CPU bound, of the random loop |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: |",
    ]
    for r in rows:
        ms = {k: 1e3 * statistics.median(v) for k, v in r["seconds_per_round"].items()}
        sps = r["sps"]
        cells = [
            r["config"],
            f"{r['envs']} x {r['rollout_len']}",
            str(r["lag"]),
            actors_words(r["actor_threads"], r["actor_processes"]),
            f"{statistics.median(sps):,.0f} [{min(sps):,.0f}–{max(sps):,.0f}]",
            _spread(r["of_random_loop"]),
            f"{ms['actor_env']:.3g} ms",
            f"{ms['actor_policy']:.3g} ms ({ms['actor_dispatch']:.3g})",
            f"{ms['actor_round']:.3g} ms",
            f"{ms['learn']:.3g} ms",
            f"{ms['learner_wait']:.3g} ms",
            f"{r['overlap_bound']:.2f}x",
            f"{statistics.median(r['cores_busy']):.2f} of {r['cores']}",
            _spread(r["cpu_bound_of_random_loop"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _spread(values: list[float]) -> str:
    """median [min–max] of shares."""
    return f"{statistics.median(values):.2f} [{min(values):.2f}–{max(values):.2f}]"
