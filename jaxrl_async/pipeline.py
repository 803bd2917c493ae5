"""The tick: act in every env for a rollout, learn from a trajectory, as one XLA program.

`tick(state) -> (state, metrics)` is scanned K times per host call by
`make_chunk`; the host compiles that chunk once (state donated) and calls it until
the run is done. Everything here is a pure function of a PipelineState pytree.

`lag` sets how the actor and the learner meet:
- lag 0: synchronous. The actor rolls out with the learner's parameters and the
  learner updates on that trajectory in the same tick.
- lag L >= 1: double-buffered. The learner updates on the trajectory the actor wrote
  in the previous tick (`in_flight`) while the actor rolls out the next one with the
  oldest of the last L parameter versions (`actor_params`, a queue). Inside a tick
  the two share no data, so XLA (or two devices) may run them at once; the data the
  learner consumes is always exactly L updates old after the first L ticks.

Off-policy agents (`Agent.data == "replay"`) use `tick_replay` instead: the replay
(offpolicy.py) sits between actor and learner, the learner samples it as the previous
tick left it, and `lag` L makes the actor act with parameters L updates old.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl_async.agents.base import ActorClock, Agent
from jaxrl_async.offpolicy import NStepTransition, make_replay_stage, mark_varying

AXIS = "data"  # the mesh axis the env batch is split over


class Transition(NamedTuple):
    """One env step of every env; a trajectory stacks them time-major [T, B, ...]."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array  # stops bootstrapping
    truncated: jax.Array  # ends the episode, bootstraps from next_obs
    next_obs: jax.Array  # the observation after the step, before any auto-reset
    extras: dict  # what the actor recorded (log-probabilities, raw actions, ...)
    version: jax.Array  # int32: learner updates behind the parameters that acted


@struct.dataclass
class PipelineState:
    learner: Any
    env_state: Any  # [B, ...] per env (sharded over the mesh)
    obs: jax.Array  # [B, ...] the observation each env shows now
    key: jax.Array
    updates: jax.Array  # learner updates done so far: the learner's parameter version
    env_steps: jax.Array  # int32 env steps of all envs in ticks so far (prefills not counted)
    # lag >= 1 only (None otherwise):
    actor_params: Any = None  # [L, ...] the last L parameter versions, oldest first
    actor_versions: Any = None  # [L]
    in_flight: Any = None  # Transition [T, B, ...] written last tick, learned on this tick
    in_flight_version: Any = None  # the parameter version that wrote it
    # off-policy agents only (None otherwise):
    replay: Any = None  # [D, ...] one replay per device (offpolicy.py), split over the mesh
    window: Any = None  # Transition [T + n - 1, B, ...] the steps the next tick stores


class Pipeline(NamedTuple):
    """Device-parallel programs over a 1-D mesh (axis AXIS); one device is a mesh of one.

    init:    key -> PipelineState (placed on the mesh)
    tick:    state -> (state, metrics)
    chunk:   num_ticks -> (state -> (state, metrics [K])), the program the host calls
    rollout: (params, env_state, obs, key) -> (env_state, obs, trajectory, episode stats)
    learn:   (learner_state, trajectory, key) -> (learner_state, metrics), the agent's
             update with the trajectory split over the mesh
    The halves of an asynchronous tick, for running actor and learner on separate meshes
    (split.py): learn_step, act_step and push (replicated, not mesh-bound).
    """

    init: Callable
    tick: Callable
    chunk: Callable[[int], Callable]
    rollout: Callable
    learn: Callable
    learn_step: Callable
    act_step: Callable
    push: Callable
    specs: PipelineState  # how each field is split over the mesh
    mesh: jax.sharding.Mesh


def make_mesh(num_devices: int = 0) -> jax.sharding.Mesh:
    """A 1-D mesh over the first `num_devices` devices (0: all of them).

    In one process these are its local devices. With several processes
    (`jax.distributed`) the mesh spans every device of every process, so each process
    steps the envs of its own devices and the gradients are averaged over all of them;
    a mesh that left a process out would leave it nothing to run, hence all or nothing.
    """
    devices = jax.devices()
    n = len(devices) if num_devices == 0 else num_devices
    if jax.process_count() > 1 and n != len(devices):
        raise ValueError(f"asked for {n} devices; a mesh over {jax.process_count()} processes "
                         f"takes all {len(devices)}")
    if not 1 <= n <= len(devices):
        raise ValueError(f"asked for {n} devices, {len(devices)} available")
    return jax.make_mesh((n,), (AXIS,), devices=devices[:n])


def make_pipeline(agent: Agent, env, env_params, rollout_len: int, num_envs: int, *,
                  unroll: int = 1, lag: int = 0, max_staleness: int = -1,
                  mesh: jax.sharding.Mesh | None = None, replay: Any = None,
                  total_steps: int = 1) -> Pipeline:
    """`env` is batched (a VecEnv, possibly wrapped); its info carries episode statistics.

    Off-policy agents (`agent.data == "replay"`) need `replay`, a ReplayConfig, and
    `total_steps`, the run's env steps (importance-weight annealing).

    The env batch, its states and trajectories are split over the mesh; parameters
    and keys are replicated. Every env draws its randomness from the step key folded
    with its global index, so results do not depend on the number of devices.
    `max_staleness` >= 0 skips (masks) a learner update whose data was produced by
    parameters more than that many updates old; -1 never skips.
    """
    if lag < 0:
        raise ValueError(f"lag must be >= 0, got {lag}")
    mesh = make_mesh(1) if mesh is None else mesh
    if num_envs % mesh.size:
        raise ValueError(f"{num_envs} envs do not split over {mesh.size} devices")
    local_envs = num_envs // mesh.size
    P = jax.sharding.PartitionSpec
    offpolicy = agent.data == "replay"
    if offpolicy:
        if replay is None:
            raise ValueError("an off-policy agent needs a replay config")
        stage = make_replay_stage(agent.replay, replay, mesh.size, total_steps, AXIS)

    def env_index():
        return jax.lax.axis_index(AXIS) * local_envs + jnp.arange(local_envs)

    def env_keys(key):
        """One key per local env: `key` folded with the env's global index."""
        return jax.vmap(jax.random.fold_in, (None, 0))(key, env_index())

    def varying(tree, specs=P(AXIS)):
        """Mark per-env values (those split along AXIS by `specs`, a prefix of `tree`) as
        differing across devices: a fresh reset may look uniform to shard_map."""
        return jax.tree.map(lambda spec, sub: jax.tree.map(lambda x: mark_varying(x, AXIS), sub)
                            if AXIS in spec else sub,
                            specs, tree)

    def rollout(params, env_state, obs, key, version=0, env_steps=0, length=rollout_len):
        env_state, obs = varying((env_state, obs), (env.partition_spec(AXIS), P(AXIS)))

        def step(carry, xs):
            env_state, obs = carry
            step_key, t = xs
            keys = jax.vmap(jax.random.split)(env_keys(step_key))
            clock = ActorClock(env_steps + t * num_envs, env_index(), num_envs)
            action, extras = agent.act(params, obs, keys[:, 0], clock)
            next_obs, env_state, reward, terminated, truncated, info = env.step(
                keys[:, 1], env_state, action, env_params)
            transition = Transition(obs, action, reward, terminated, truncated,
                                    info["final_observation"], extras,
                                    jnp.full(reward.shape, version, jnp.int32))
            episodes = (info["episode_done"], info["episode_return"], info["episode_length"])
            return (env_state, next_obs), (transition, episodes)

        (env_state, obs), (traj, (done, ret, ep_length)) = jax.lax.scan(
            step, (env_state, obs), (jax.random.split(key, length), jnp.arange(length)),
            unroll=unroll)
        stats = {"episodes": done.sum(dtype=jnp.int32),
                 "episode_return_sum": ret.sum(dtype=jnp.float32),
                 "episode_length_sum": ep_length.sum(dtype=jnp.float32)}
        return env_state, obs, varying(traj), jax.lax.psum(stats, AXIS)

    tick_steps = rollout_len * num_envs
    n_step = agent.replay.n_step if offpolicy else 1

    def init_replay(params, env_state, obs, key):
        """An empty replay per device and a first window: T + n - 1 steps rolled out with
        the initial parameters (not counted in env_steps), which tick 0 stores."""
        keys = jax.random.split(key, local_envs)
        clock = ActorClock(jnp.int32(0), env_index(), num_envs)
        action = jax.eval_shape(agent.act, params, obs, keys, clock)[0]
        zeros = lambda x: jnp.zeros(x.shape[1:], x.dtype)  # noqa: E731
        example = NStepTransition(zeros(obs), zeros(action), jnp.float32(0), jnp.float32(0),
                                  zeros(obs))
        replay = jax.tree.map(lambda x: x[None], stage.init(example))
        env_state, obs, window, _ = rollout(params, env_state, obs, key,
                                            length=rollout_len + n_step - 1)
        return env_state, obs, varying(replay), window

    def init(key):
        reset_key, agent_key, key = jax.random.split(key, 3)
        obs, env_state = varying(env.reset(env_keys(reset_key), env_params),
                                 (P(AXIS), env.partition_spec(AXIS)))
        learner = agent.init(agent_key)
        state = PipelineState(learner, env_state, obs, key, jnp.int32(0), jnp.int32(0))
        key, prefill_key = jax.random.split(key)
        if offpolicy:
            env_state, obs, replay, window = init_replay(learner.params, env_state, obs,
                                                       prefill_key)
            state = state.replace(env_state=env_state, obs=obs, key=key, replay=replay,
                                  window=window)
        if lag == 0:
            return state
        queue = jax.tree.map(lambda p: jnp.broadcast_to(p, (lag, *p.shape)), learner.params)
        state = state.replace(actor_params=queue, actor_versions=jnp.zeros((lag,), jnp.int32))
        if offpolicy:
            return state
        # Fill the double buffer: one rollout with the initial parameters.
        env_state, obs, traj, _ = rollout(learner.params, env_state, obs, prefill_key)
        return state.replace(env_state=env_state, obs=obs, key=key, in_flight=traj,
                             in_flight_version=jnp.int32(0))

    def learn(learner_state, updates, traj, version, key):
        """The learner's update on `traj`, masked when its data is too stale."""
        staleness = updates - version
        learner, metrics = agent.learn(learner_state, traj, key)
        updated = jnp.bool_(True) if max_staleness < 0 else staleness <= max_staleness
        if max_staleness >= 0:
            learner = jax.tree.map(lambda new, old: jnp.where(updated, new, old),
                                   learner, learner_state)
        metrics = {**metrics, **lag_metrics(staleness),
                   "skipped_updates": 1.0 - updated.astype(jnp.float32)}
        return learner, updates + updated.astype(jnp.int32), metrics

    def lag_metrics(staleness):
        staleness = staleness.astype(jnp.float32)
        return {"policy_lag": staleness, "policy_lag_max": staleness}

    def act(actor_params, actor_versions, env_state, obs, key, env_steps=0):
        """The actor's half of an asynchronous tick: roll out with the oldest queued params.

        Returns (env_state, obs, trajectory, stats, version, next key, the learner's key).
        """
        key, rollout_key, learn_key = jax.random.split(key, 3)
        oldest = jax.tree.map(lambda q: q[0], actor_params)
        env_state, obs, traj, stats = rollout(oldest, env_state, obs, rollout_key,
                                              actor_versions[0], env_steps)
        return env_state, obs, traj, stats, actor_versions[0], key, learn_key

    def push(actor_params, actor_versions, params, version):
        """Queue the learner's newest parameters; the oldest drop out."""
        shift = lambda queue, new: jnp.concatenate([queue[1:], new[None]])  # noqa: E731
        return jax.tree.map(shift, actor_params, params), shift(actor_versions, version)

    def tick_sync(state: PipelineState):
        key, rollout_key, learn_key = jax.random.split(state.key, 3)
        env_state, obs, traj, stats = rollout(state.learner.params, state.env_state, state.obs,
                                              rollout_key, state.updates, state.env_steps)
        learner, updates, metrics = learn(state.learner, state.updates, traj, state.updates,
                                          learn_key)
        state = state.replace(learner=learner, env_state=env_state, obs=obs, key=key,
                              updates=updates, env_steps=state.env_steps + tick_steps)
        return state, {**metrics, **stats}

    def tick_async(state: PipelineState):
        # Actor: nothing here reads the learner's output.
        env_state, obs, traj, stats, version, key, learn_key = act(
            state.actor_params, state.actor_versions, state.env_state, state.obs, state.key,
            state.env_steps)
        # Learner: last tick's trajectory.
        learner, updates, metrics = learn(state.learner, state.updates, state.in_flight,
                                          state.in_flight_version, learn_key)
        actor_params, actor_versions = push(state.actor_params, state.actor_versions,
                                            learner.params, updates)
        state = state.replace(
            learner=learner, env_state=env_state, obs=obs, key=key, updates=updates,
            env_steps=state.env_steps + tick_steps, actor_params=actor_params,
            actor_versions=actor_versions, in_flight=traj, in_flight_version=version)
        return state, {**metrics, **stats}

    def tick_replay(state: PipelineState):
        """Off-policy: store last tick's steps, learn from the replay, act; the actor's
        rollout and the learner share nothing (offpolicy.py).

        The replay already decouples the learner from the actor's latest data, so `lag`
        acts on parameters: at lag L the actor uses the parameters of L updates ago.
        """
        if lag == 0:
            params, version = state.learner.params, state.updates
        else:
            params = jax.tree.map(lambda q: q[0], state.actor_params)
            version = state.actor_versions[0]
        key, rollout_key, learn_key = jax.random.split(state.key, 3)
        env_state, obs, traj, stats = rollout(params, state.env_state, state.obs, rollout_key,
                                              version, state.env_steps)
        replay = stage.store(jax.tree.map(lambda x: x[0], state.replay), state.window)
        learner, replay, metrics, learned = stage.learn(agent.learn, state.learner, replay,
                                                        state.env_steps, learn_key)
        updates = state.updates + learned.astype(jnp.int32)
        new_state = state.replace(
            learner=learner, env_state=env_state, obs=obs, key=key, updates=updates,
            env_steps=state.env_steps + tick_steps,
            replay=varying(jax.tree.map(lambda x: x[None], replay)),
            window=stage.advance(state.window, traj))
        if lag:  # queue the parameters this tick started from: the actor stays `lag` behind
            actor_params, actor_versions = push(state.actor_params, state.actor_versions,
                                                state.learner.params, state.updates)
            new_state = new_state.replace(actor_params=actor_params,
                                          actor_versions=actor_versions)
        metrics = {**metrics, **lag_metrics(state.updates - version),
                   "learning": learned.astype(jnp.float32)}
        return new_state, {**metrics, **stats}

    on_policy_lag = lag > 0 and not offpolicy
    specs = PipelineState(
        learner=P(), env_state=env.partition_spec(AXIS), obs=P(AXIS), key=P(), updates=P(),
        env_steps=P(), actor_params=P() if lag else None, actor_versions=P() if lag else None,
        in_flight=P(None, AXIS) if on_policy_lag else None,
        in_flight_version=P() if on_policy_lag else None,
        replay=P(AXIS) if offpolicy else None,
        window=P(None, AXIS) if offpolicy else None)
    tick = tick_replay if offpolicy else tick_sync if lag == 0 else tick_async

    def on_mesh(f, in_specs, out_specs):
        return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs)

    return Pipeline(
        init=on_mesh(init, (P(),), specs),
        tick=on_mesh(tick, (specs,), (specs, P())),
        chunk=lambda num_ticks: on_mesh(make_chunk(tick, num_ticks), (specs,), (specs, P())),
        rollout=on_mesh(rollout, (P(), env.partition_spec(AXIS), P(AXIS), P()),
                        (env.partition_spec(AXIS), P(AXIS), P(None, AXIS), P())),
        learn=on_mesh(agent.learn, (P(), P(None, AXIS), P()), (P(), P())),
        learn_step=on_mesh(learn, (P(), P(), P(None, AXIS), P(), P()), (P(), P(), P())),
        act_step=on_mesh(act, (P(), P(), env.partition_spec(AXIS), P(AXIS), P()),
                         (env.partition_spec(AXIS), P(AXIS), P(None, AXIS), P(), P(), P(),
                          P())),
        push=push, specs=specs, mesh=mesh)


def vmap_seeds(pipeline: Pipeline) -> Pipeline:
    """The pipeline over a leading seed axis: init takes keys [N], the chunk maps over
    N states (each seed its own envs, replay and parameters) in one program.

    Seed k equals a run with seed k alone up to float rounding: vmapped matmuls and
    reductions may associate differently (measured: parameters within 1e-6).
    """
    return pipeline._replace(
        init=jax.vmap(pipeline.init),
        chunk=lambda num_ticks: jax.vmap(pipeline.chunk(num_ticks)))


def seed_keys(seed: int, num_seeds: int, impl: str):
    """Keys [N] equal to jax.random.key(seed + k, impl) for each k."""
    return jax.vmap(lambda s: jax.random.key(s, impl=impl))(
        jnp.arange(seed, seed + num_seeds, dtype=jnp.uint32))


def make_chunk(tick, num_ticks: int):
    """K ticks in one program; metrics come back stacked [K]."""

    def chunk(state):
        return jax.lax.scan(lambda s, _: tick(s), state, None, length=num_ticks)

    return chunk


# XLA options for bitwise run-to-run reproducibility (train.deterministic). XLA on CPU is
# deterministic already (same program, same device count: same bits); on GPUs these make
# scatters and reductions deterministic or refuse to compile ops that cannot be.
DETERMINISTIC_OPTIONS = {"xla_gpu_deterministic_ops": True,
                         "xla_gpu_exclude_nondeterministic_ops": True}


def compile_chunk(chunk, state, options: dict | None = None) -> Callable:
    """Trace and compile ahead of time with the state donated; `state` may be abstract.
    `options` are XLA compiler options (DETERMINISTIC_OPTIONS)."""
    return jax.jit(chunk, donate_argnums=0).lower(state).compile(compiler_options=options)


def init_and_compile(pipeline: Pipeline, key, num_ticks: int, options: dict | None = None):
    """(initial state, compiled chunk), compiling the two programs concurrently.

    XLA compiles without holding the GIL, so the chunk (traced from the abstract
    state) compiles in a worker thread while this thread compiles and runs init.
    Init runs once, so it is compiled at the lowest optimisation level.
    """
    init_lowered = jax.jit(pipeline.init).lower(key)
    abstract_state = init_lowered.out_info
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        chunk_future = pool.submit(compile_chunk, pipeline.chunk(num_ticks), abstract_state,
                                   options)
        init = init_lowered.compile(
            compiler_options={**(options or {}), "xla_backend_optimization_level": 0})
        state = init(key)
        chunk = chunk_future.result()
    return jax.block_until_ready(state), chunk


def plan_calls(num_updates: int, target: int) -> tuple[int, int]:
    """(ticks per host call, host calls): every call runs the same compiled chunk.

    Prefers the largest divisor of num_updates not above `target`; when that is under
    half the target (num_updates prime, say) the run is shortened to a whole number
    of target-sized calls instead, dropping fewer than `target` updates, rather than
    compiling a second program for the remainder.
    """
    target = max(1, min(target, num_updates))
    ticks = max(d for d in range(1, target + 1) if num_updates % d == 0)
    if 2 * ticks < target:
        ticks = target
    return ticks, num_updates // ticks
