"""`jaxrl-async bench --profile`: where the time of a tick goes, phase by phase.

Each phase is compiled as its own program and looped on device with its state donated
(the bench's `calibrated_loop`), at the config's shapes, one seed, one device, fused
placement at the config's lag:

  tick     the whole tick as training runs it (`pipeline.tick`, its metrics kept)
  rollout  the actor's half: env steps, the policy's forward pass, the trajectory
           written out, episode statistics
  learn    the learner's half, on a fixed trajectory (on-policy) or on the replay once
           it is past `learning_starts` (off-policy), in two parts:
    returns  on-policy: the critic over the trajectory and the advantages
             (`Agent.targets`; IMPALA computes V-trace inside its loss, so there it is
             part of the update); off-policy: storing the window (n-step returns and
             the replay write)
    update   the rest of the learner: gradient steps, and off-policy sampling and
             priorities
  rest     tick − rollout − learn: what binds the halves (the parameter queue,
           versions, staleness masks, counters). Negative where XLA runs the halves of
           a lag ≥ 1 tick at once.

The overlap bound (`overlap_bound`) is the most that running the two halves at once
(split placement at lag ≥ 1) could speed the tick up, if each half kept its speed on a
device of its own: tick / (tick − the shorter half), at least 1.

Shares are of the tick's time. A phase timed alone may fuse and schedule differently
than inside the tick; `rest` absorbs that difference too.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from jaxrl_async.config.loader import Config
from jaxrl_async.pipeline.build import build_pipeline
from jaxrl_async.pipeline.sharding import AXIS
from jaxrl_async.pipeline.ticks import ReplayInputs, actor_state
from jaxrl_async.replay.stage import make_replay_stage
from jaxrl_async.run.compile_cache import configure_compile_cache

PHASES = ("rollout", "returns", "update", "rest")
PROFILE_OVERRIDES = (
    "pipeline.devices=1",
    "pipeline.placement=fused",
    "train.num_seeds=1",
    "eval.every=0",
)


def _zeros_like(tree):
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), tree)


def _copy(tree):
    """A copy to hand a phase: each phase's program donates its carry."""
    return jax.tree.map(jnp.copy, tree)


def _fill_replay(pipeline, state, learning_starts: int):
    """Tick until the actor has taken `learning_starts` steps, so the learner learns."""
    tick = jax.jit(
        lambda s: jax.lax.fori_loop(0, 64, lambda _, s: pipeline.tick(s)[0], s), donate_argnums=0
    )
    while int(state.env_steps) < learning_starts:
        state = tick(state)
    return jax.block_until_ready(state)


def profile_config(config: Config, seconds: float, repeats: int, calibrated_loop) -> dict:
    """Seconds per tick of each phase (lists of `repeats`), and their median shares.

    `calibrated_loop(body, carry, seconds)` is the bench's. Every phase is compiled and
    calibrated first; then the phases are timed in turn, `repeats` rounds, so that a
    noisy spell on a shared machine falls on all of them alike."""
    configure_compile_cache(config.train.compile_cache)
    pipeline, agent = build_pipeline(config)
    offpolicy = agent.data == "replay"
    key = jax.random.key(config.train.seed, impl=config.prng_impl)
    state = jax.block_until_ready(jax.jit(pipeline.init)(key))
    if offpolicy:
        state = _fill_replay(pipeline, state, config.replay.learning_starts)
    phases = {"tick": _tick_phase(pipeline, state), "rollout": _act_phase(pipeline, state)}
    learn_key = jax.random.key(1, impl=config.prng_impl)
    if offpolicy:
        phases.update(_replay_learner_phases(config, pipeline, agent, state, learn_key))
    else:
        phases.update(_trajectory_learner_phases(pipeline, agent, state, learn_key))
    loops = {name: calibrated_loop(body, carry, seconds) for name, (body, carry) in phases.items()}
    times: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(repeats):
        for name, loop in loops.items():
            times[name].append(loop.timed() / loop.iterations)
    med = {k: statistics.median(v) for k, v in times.items()}
    tick, returns = med["tick"], med.get("returns", 0.0)
    shares = {
        "rollout": med["rollout"] / tick,
        "returns": returns / tick,
        "update": (med["learn"] - returns) / tick,
        "rest": (tick - med["rollout"] - med["learn"]) / tick,
    }
    tick_steps = config.pipeline.rollout_len * config.env.num_envs
    return {
        "config": config.name,
        "algo": config.agent.name,
        "envs": config.env.num_envs,
        "rollout_len": config.pipeline.rollout_len,
        "lag": config.pipeline.lag,
        "tick_steps": tick_steps,
        "seconds_per_tick": times,
        "shares": shares,
        "compile_seconds": {name: loop[2] for name, loop in loops.items()},
        "returns_in": (
            "store" if offpolicy else "targets" if agent.targets is not None else "update"
        ),
        "sps": tick_steps / tick,
        "overlap_bound": overlap_bound(tick, med["rollout"], med["learn"]),
    }


def overlap_bound(tick: float, rollout: float, learn: float) -> float:
    """The most that running the halves at once could speed a tick up: it saves at most
    the shorter half, and is never shorter than the longer one (where the halves took
    longer alone than inside the tick, the negative rest, that is the one that binds)."""
    return max(1.0, tick / max(tick - min(rollout, learn), max(rollout, learn)))


def _tick_phase(pipeline, state):
    """The tick; its metrics ride in the carry so that XLA computes them, as in a chunk."""
    metrics = _zeros_like(jax.eval_shape(pipeline.tick, state)[1])
    return lambda c: pipeline.tick(c[0]), (_copy(state), metrics)


def _act_phase(pipeline, state):
    """The actor's half, its trajectory and statistics carried (as the tick uses them)."""
    version = jnp.int32(int(state.updates))
    args = (state.learner.params, version, actor_state(state))
    acted = _zeros_like(jax.eval_shape(pipeline.act, *args))
    acted = _copy(
        acted._replace(
            env_state=state.env_state,
            obs=state.obs,
            memory=state.memory,
            key=state.key,
            env_steps=state.env_steps,
        )
    )

    def act(c):
        params, version, a = c
        return params, version, pipeline.act(params, version, actor_state(a))

    return act, (_copy(state.learner.params), version, acted)


def _trajectory_learner_phases(pipeline, agent, state, key) -> dict:
    """learn: `pipeline.learn_step` on one trajectory, over and over; returns:
    `agent.targets` on it."""
    version = int(state.updates)
    rollout = jax.jit(pipeline.rollout)(
        _copy(state.learner.params),
        _copy(state.env_state),
        _copy(state.obs),
        _copy(state.memory),
        _copy(state.key),
    )
    traj = rollout[3]
    metrics = _zeros_like(
        jax.eval_shape(pipeline.learn_step, state.learner, state.updates, traj, version, key)[2]
    )

    def learn(c):
        learner, updates, traj, key, _ = c
        key, step_key = jax.random.split(key)
        learner, updates, metrics = pipeline.learn_step(learner, updates, traj, version, step_key)
        return learner, updates, traj, key, metrics

    # name -> (body, carry): the loop calls body(carry) -> carry
    phases: dict[str, tuple[Callable, tuple]] = {
        "learn": (learn, (_copy(state.learner), _copy(state.updates), _copy(traj), key, metrics))
    }
    if agent.targets is not None:
        # one device: the specs only have to match the trajectory's layout
        targets = jax.shard_map(
            agent.targets,
            mesh=pipeline.mesh,
            in_specs=(P(), P(None, AXIS)),
            out_specs=P(None, AXIS),
            check_vma=False,
        )

        def returns(c):
            # The barrier keeps XLA from hoisting the loop-invariant call out of the loop.
            learner, traj = jax.lax.optimization_barrier((c[0], c[1]))
            return learner, traj, targets(learner, traj)

        data = _zeros_like(jax.eval_shape(targets, state.learner, traj))
        phases["returns"] = returns, (_copy(state.learner), _copy(traj), data)
    return phases


def _replay_learner_phases(config, pipeline, agent, state, key) -> dict:
    """learn: `pipeline.learn_step` (store the window, sample, update) over and over on
    the filled replay; returns: storing the window alone."""
    env_steps = jnp.maximum(state.env_steps, config.replay.learning_starts)
    obs_stats = pipeline.obs_stats(state.env_state)
    version = int(state.updates)
    metrics = _zeros_like(
        jax.eval_shape(
            pipeline.learn_step,
            state.learner,
            state.updates,
            state.replay,
            state.window,
            ReplayInputs(env_steps, version, obs_stats, key),
        )[3]
    )

    def learn(c):
        learner, updates, replay, window, key, _ = c
        key, step_key = jax.random.split(key)
        learner, updates, replay, metrics = pipeline.learn_step(
            learner, updates, replay, window, ReplayInputs(env_steps, version, obs_stats, step_key)
        )
        return learner, updates, replay, window, key, metrics

    stage = make_replay_stage(agent.replay, config.replay, 1, config.train.total_steps)

    # as make_replay_learn stores: vmapped over the replay's device axis
    store = jax.shard_map(
        jax.vmap(stage.store, in_axes=(0, None)),
        mesh=pipeline.mesh,
        in_specs=(P(AXIS), P(None, AXIS)),
        out_specs=P(AXIS),
        check_vma=False,
    )
    return {
        "learn": (
            learn,
            (
                _copy(state.learner),
                _copy(state.updates),
                _copy(state.replay),
                _copy(state.window),
                key,
                metrics,
            ),
        ),
        "returns": (lambda c: (store(*c), c[1]), (_copy(state.replay), _copy(state.window))),
    }


def table(rows: list[dict]) -> str:
    """Markdown: per config, the tick's time and each phase's share (median [min–max] of
    the tick, shares of medians), and the most overlapping the halves could win."""
    lines = [
        "| config | envs x steps | lag | tick | SPS | rollout | returns | update | rest "
        "| overlap bound |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        tick = [1e3 * t for t in r["seconds_per_tick"]["tick"]]
        s = r["shares"]
        returns = "in update" if r["returns_in"] == "update" else f"{100 * s['returns']:.0f}%"
        lines.append(
            f"| {r['config']} | {r['envs']} x {r['rollout_len']} | {r['lag']} | "
            f"{statistics.median(tick):.3g} ms [{min(tick):.3g}–{max(tick):.3g}] | "
            f"{r['sps'] / 1e3:,.0f}k | {100 * s['rollout']:.0f}% | {returns} | "
            f"{100 * s['update']:.0f}% | {100 * s['rest']:.0f}% | "
            f"{r['overlap_bound']:.2f}x |"
        )
    return "\n".join(lines)
