"""`jaxrl-async bench --profile` for a host-env config: where a round's time goes.

A host run has no compiled tick to take apart; its executor times itself instead
(`host/round_times.py` RoundTimes, the rounds after the first): the slowest actor's time in
env.step and in the policy (of which dispatching its calls; the rest waits for results), and
the learner's time learning and waiting for rounds.
Each repeat trains `rounds` rounds of the config; the bound on what overlapping actor
and learner can win (lag >= 1 against lag 0) is (actor + learner) / max(actor, learner),
the actor's whole round (env, policy and its own work) against the learner's learning.
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
    }


def host_table(rows: list[dict]) -> str:
    """Markdown: per config, SPS and each side's milliseconds a round (medians)."""
    lines = [
        "| config | envs x steps | lag | actors | SPS | of the env's random loop "
        "| env step | policy (dispatch) | actor round | learn | learner waits | overlap bound |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        ms = {k: 1e3 * statistics.median(v) for k, v in r["seconds_per_round"].items()}
        sps, share = r["sps"], r["of_random_loop"]
        actors = actors_words(r["actor_threads"], r["actor_processes"])
        lines.append(
            f"| {r['config']} | {r['envs']} x {r['rollout_len']} | {r['lag']} | "
            f"{actors} | {statistics.median(sps):,.0f} [{min(sps):,.0f}–"
            f"{max(sps):,.0f}] | {statistics.median(share):.2f} [{min(share):.2f}–"
            f"{max(share):.2f}] | {ms['actor_env']:.3g} ms | {ms['actor_policy']:.3g} ms "
            f"({ms['actor_dispatch']:.3g}) | {ms['actor_round']:.3g} ms | "
            f"{ms['learn']:.3g} ms | {ms['learner_wait']:.3g} ms | {r['overlap_bound']:.2f}x |"
        )
    return "\n".join(lines)
