"""The tick: act in every env for a rollout, learn, as one XLA program.

`tick(state) -> (state, metrics)` is scanned K times per host call (`make_chunk`);
the host compiles that chunk once (state donated) and calls it until the run is done.
Everything here is a pure function of a PipelineState pytree. A tick has two halves:

- the actor (`make_act`): one rollout with the parameters in front of the parameter
  queue, advancing the env step clock;
- the learner (`make_learn` or the replay stage): one update, on a trajectory or on
  samples of the replay.

`lag` sets how the halves meet, one tick builder each:
- `make_sync_tick`, lag 0: the actor rolls out with the learner's parameters and the
  learner updates on that trajectory in the same tick.
- `make_async_tick`, lag L >= 1: double-buffered. The learner updates on the
  trajectory the actor wrote in the previous tick (`in_flight`) while the actor rolls
  out the next one with the oldest of the last L parameter versions (`ParamQueue`).
  Inside a tick the halves share no data, so XLA (or two device groups, split.py) may
  run them at once; after the first L ticks the data the learner consumes is exactly
  L updates old. Split placement runs this same `async_tick` with its halves compiled
  on two meshes, so the two placements cannot drift apart.
- `make_replay_tick`, off-policy agents: the replay (offpolicy.py) sits between actor
  and learner; the learner samples it as the previous tick left it, and at lag L the
  actor acts with the parameters of L updates ago.
"""

from __future__ import annotations

import concurrent.futures
import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct
from jax.sharding import PartitionSpec as P

from jaxrl_async.offpolicy import make_replay_stage
from jaxrl_async.rollout import env_keys, make_rollout
from jaxrl_async.sharding import AXIS, make_mesh
from jaxrl_async.types import Agent


@struct.dataclass
class ParamQueue:
    """The last L parameter versions, oldest first: the actor acts with the oldest, so it
    stays L learner updates behind; each tick pushes the newest and drops the oldest."""

    params: Any  # [L, ...]
    versions: jax.Array  # int32 [L] the learner update count of each


def queue_init(params, lag: int) -> ParamQueue:
    return ParamQueue(jax.tree.map(lambda p: jnp.broadcast_to(p, (lag, *p.shape)), params),
                      jnp.zeros((lag,), jnp.int32))


def queue_oldest(queue: ParamQueue):
    """(params, version) at the front of the queue: what the actor uses."""
    return jax.tree.map(lambda q: q[0], queue.params), queue.versions[0]


def queue_push(queue: ParamQueue, params, version) -> ParamQueue:
    shift = lambda q, new: jnp.concatenate([q[1:], new[None]])  # noqa: E731
    return ParamQueue(jax.tree.map(shift, queue.params, params), shift(queue.versions, version))


@struct.dataclass
class PipelineState:
    learner: Any
    env_state: Any  # [B, ...] per env (split over the mesh)
    obs: jax.Array  # [B, ...] the observation each env shows now
    key: jax.Array
    updates: jax.Array  # learner updates done so far: the learner's parameter version
    env_steps: jax.Array  # int32 env steps of all envs in ticks so far (prefills not counted)
    # recurrent agents only (None otherwise): Memory [B, ...], each env's carry and whether
    # its current observation starts an episode; split over the mesh with the envs
    memory: Any = None
    # lag >= 1 only (None otherwise):
    actor_queue: ParamQueue | None = None
    # on-policy agents at lag >= 1 only (None otherwise):
    in_flight: Any = None  # Transition [T, B, ...] written last tick, learned on this tick
    in_flight_version: Any = None  # the parameter version that wrote it
    # off-policy agents only (None otherwise):
    replay: Any = None  # [D, ...] one replay per device (offpolicy.py), split over the mesh
    window: Any = None  # Transition [T + n - 1, B, ...] the steps the next tick stores


def state_specs(env, lag: int, offpolicy: bool, recurrent: bool = False) -> PipelineState:
    """How each field of a PipelineState is split over the mesh (None: absent)."""
    double_buffered = lag > 0 and not offpolicy
    return PipelineState(
        learner=P(), env_state=env.partition_spec(AXIS), obs=P(AXIS), key=P(), updates=P(),
        env_steps=P(), memory=P(AXIS) if recurrent else None,
        actor_queue=P() if lag else None,
        in_flight=P(None, AXIS) if double_buffered else None,
        in_flight_version=P() if double_buffered else None,
        replay=P(AXIS) if offpolicy else None,
        window=P(None, AXIS) if offpolicy else None)


class Acted(NamedTuple):
    """The actor's half of a tick: the envs moved on, a trajectory and its statistics."""

    env_state: Any
    obs: jax.Array
    memory: Any  # Memory [B, ...] (None: a memoryless agent)
    key: jax.Array  # the run's key for the next tick
    env_steps: jax.Array
    traj: Any  # Transition [T, B, ...]
    version: jax.Array  # the parameter version that acted
    stats: dict  # episode statistics of the rollout, summed over the mesh
    learn_key: jax.Array  # this tick's key for the learner


def make_act(rollout: Callable, tick_steps: int) -> Callable:
    """act(params, version, env_state, obs, memory, key, env_steps) -> Acted: one rollout."""

    def act(params, version, env_state, obs, memory, key, env_steps) -> Acted:
        key, rollout_key, learn_key = jax.random.split(key, 3)
        env_state, obs, memory, traj, stats = rollout(params, env_state, obs, memory,
                                                      rollout_key, version, env_steps)
        return Acted(env_state, obs, memory, key, env_steps + tick_steps, traj, version,
                     stats, learn_key)

    return act


def act_from(state: PipelineState, act: Callable, params, version) -> Acted:
    """The actor's half of a tick from `state`, acting with `params` of `version`."""
    return act(params, version, state.env_state, state.obs, state.memory, state.key,
               state.env_steps)


def acted_fields(acted: Acted) -> dict:
    """The PipelineState fields the actor's half moves on (for `state.replace`)."""
    return {"env_state": acted.env_state, "obs": acted.obs, "memory": acted.memory,
            "key": acted.key, "env_steps": acted.env_steps}


def lag_metrics(staleness) -> dict:
    staleness = staleness.astype(jnp.float32)
    return {"policy_lag": staleness, "policy_lag_max": staleness}


def make_learn(agent: Agent, max_staleness: int) -> Callable:
    """learn(learner, updates, traj, version, key) -> (learner, updates, metrics): the
    agent's update on a trajectory, masked when its data is more than `max_staleness`
    updates old (-1: never)."""

    def learn(learner_state, updates, traj, version, key):
        staleness = updates - version
        learner, metrics = agent.learn(learner_state, traj, key)
        updated = jnp.bool_(True) if max_staleness < 0 else staleness <= max_staleness
        if max_staleness >= 0:
            learner = jax.tree.map(lambda new, old: jnp.where(updated, new, old),
                                   learner, learner_state)
        metrics = {**metrics, **lag_metrics(staleness),
                   "skipped_updates": 1.0 - updated.astype(jnp.float32)}
        return learner, updates + updated.astype(jnp.int32), metrics

    return learn


def make_sync_tick(act: Callable, learn: Callable) -> Callable:
    """Lag 0: roll out with the learner's parameters, then learn on that trajectory."""

    def tick(state: PipelineState):
        acted = act_from(state, act, state.learner.params, state.updates)
        learner, updates, metrics = learn(state.learner, state.updates, acted.traj,
                                          acted.version, acted.learn_key)
        state = state.replace(learner=learner, updates=updates, **acted_fields(acted))
        return state, {**metrics, **acted.stats}

    return tick


def _same(x, spec=None):
    return x


def async_tick(state: PipelineState, act: Callable, learn: Callable, push: Callable,
               oldest: Callable = queue_oldest, to_actor: Callable = _same,
               to_learner: Callable = _same):
    """One double-buffered tick. The actor rolls out with the queue's oldest parameters
    while the learner updates on last tick's trajectory; nothing the actor does reads
    the learner's output. `to_actor(x)` / `to_learner(x, spec)` move values between the
    two halves' devices: the identity inside one program, device_put under split
    placement, which calls this function with its halves (`oldest` among them)
    compiled separately."""
    params, version = oldest(state.actor_queue)
    acted = act_from(state, act, params, version)
    learner, updates, metrics = learn(state.learner, state.updates, state.in_flight,
                                      state.in_flight_version, to_learner(acted.learn_key, P()))
    queue = push(state.actor_queue, to_actor(learner.params), to_actor(updates))
    state = state.replace(
        learner=learner, updates=updates, **acted_fields(acted), actor_queue=queue,
        in_flight=to_learner(acted.traj, P(None, AXIS)),
        in_flight_version=to_learner(acted.version, P()))
    return state, {**metrics, **acted.stats}


def make_async_tick(act: Callable, learn: Callable) -> Callable:
    """Lag >= 1 in one program (fused placement)."""
    return functools.partial(async_tick, act=act, learn=learn, push=queue_push)


def make_replay_learn(stage, agent_learn: Callable, observe: Callable) -> Callable:
    """learn(learner, updates, replay, window, env_steps, version, obs_stats, key) ->
    (learner, updates, replay, metrics): store the window's steps, then learn from the
    replay (offpolicy.py). `version` is the parameter version that acted this tick.

    The replay holds raw observations; `observe(obs_stats, obs)` turns each sampled
    batch into what the agent sees, under the env's current observation statistics."""

    def learn(learner, updates, replay, window, env_steps, version, obs_stats, key):
        def learn_seen(learner, sample, key):
            items = sample.items._replace(obs=observe(obs_stats, sample.items.obs),
                                          next_obs=observe(obs_stats, sample.items.next_obs))
            return agent_learn(learner, sample._replace(items=items), key)

        # The replay keeps its leading device axis (of 1 here) from the state in to the
        # state out: the store is vmapped over it and the update drops it only where it
        # reads the buffer. Squeezed here and re-stacked on the way out, the stored
        # buffer reached the learner and the state as two differently shaped views, and
        # XLA updated each view separately, copying every replay array about three
        # times a tick (SAC, 1e5 slots: 2.3x slower).
        replay = jax.vmap(stage.store, in_axes=(0, None))(replay, window)
        learner, replay, metrics, learned = stage.learn(learn_seen, learner, replay,
                                                        env_steps, key, stacked=True)
        metrics = {**metrics, **lag_metrics(updates - version),
                   "learning": learned.astype(jnp.float32)}
        return learner, updates + learned.astype(jnp.int32), replay, metrics

    return learn


def replay_tick(state: PipelineState, act: Callable, learn: Callable, advance: Callable,
                push: Callable, obs_stats: Callable, oldest: Callable = queue_oldest,
                to_actor: Callable = _same, to_learner: Callable = _same):
    """One off-policy tick: the actor rolls out while the learner stores last tick's
    steps and learns from the replay; the two share nothing. At lag L the actor acts
    with the parameters of L updates ago (the replay already decouples the learner
    from the newest data). `obs_stats(env_state)`: the env's observation statistics
    (None without normalisation). `to_actor` / `to_learner` as in `async_tick`."""
    queue = state.actor_queue
    params, version = ((state.learner.params, state.updates) if queue is None  # lag 0
                       else oldest(queue))
    acted = act_from(state, act, params, version)
    if queue is not None:  # the parameters this tick started from join the queue
        queue = push(queue, to_actor(state.learner.params), to_actor(state.updates))
    learner, updates, replay, metrics = learn(
        state.learner, state.updates, state.replay, state.window,
        to_learner(state.env_steps, P()), to_learner(version, P()),
        to_learner(obs_stats(state.env_state), P()), to_learner(acted.learn_key, P()))
    state = state.replace(
        learner=learner, updates=updates, **acted_fields(acted), actor_queue=queue, replay=replay,
        window=advance(state.window, to_learner(acted.traj, P(None, AXIS))))
    return state, {**metrics, **acted.stats}


def make_replay_tick(act: Callable, learn: Callable, advance: Callable,
                     obs_stats: Callable) -> Callable:
    """Off-policy agents in one program (fused placement), any lag."""
    return functools.partial(replay_tick, act=act, learn=learn, advance=advance,
                             push=queue_push, obs_stats=obs_stats)


def make_init(agent: Agent, env, env_params, rollout: Callable, rollout_len: int,
              num_envs: int, local_envs: int, lag: int, stage=None) -> Callable:
    """init(key) -> PipelineState: reset the envs, initialise the learner, fill the
    parameter queue with the initial parameters, and prefill what the first tick
    consumes (not counted in env_steps): at lag >= 1 on-policy, one rollout in flight;
    off-policy, an empty replay per device and a first window of T + n - 1 steps
    (T + L - stride for sequences)."""

    def init_replay(params, env_state, obs, memory, key):
        env_state, obs, memory, window, _ = rollout(params, env_state, obs, memory, key,
                                                    length=rollout_len + stage.carried)
        replay = jax.tree.map(lambda x: x[None], stage.init(stage.example(window)))
        return env_state, obs, memory, replay, window

    def init(key):
        reset_key, agent_key, key = jax.random.split(key, 3)
        obs, env_state = env.reset(env_keys(reset_key, local_envs), env_params)
        learner = agent.init(agent_key)
        state = PipelineState(learner, env_state, obs, key, jnp.int32(0), jnp.int32(0),
                              memory=agent.initial_memory(local_envs))
        if lag:
            state = state.replace(actor_queue=queue_init(learner.params, lag))
        key, prefill_key = jax.random.split(key)
        if stage is not None:
            env_state, obs, memory, replay, window = init_replay(
                learner.params, env_state, obs, state.memory, prefill_key)
            return state.replace(env_state=env_state, obs=obs, memory=memory, key=key,
                                 replay=replay, window=window)
        if lag == 0:
            return state
        env_state, obs, memory, traj, _ = rollout(learner.params, env_state, obs,
                                                  state.memory, prefill_key)
        return state.replace(env_state=env_state, obs=obs, memory=memory, key=key,
                             in_flight=traj, in_flight_version=jnp.int32(0))

    return init


class Pipeline(NamedTuple):
    """Device-parallel programs over a 1-D mesh (axis AXIS); one device is a mesh of one.

    init:    key -> PipelineState (placed on the mesh)
    tick:    state -> (state, metrics)
    chunk:   num_ticks -> (state -> (state, metrics [K])), the program the host calls
    rollout: (params, env_state, obs, memory, key) -> (env_state, obs, memory, trajectory,
             episode stats); memory is None for a memoryless agent
    learn:   (learner_state, trajectory, key) -> (learner_state, metrics), the agent's
             update with the trajectory split over the mesh
    The halves of an asynchronous tick on this mesh, for split placement (split.py):
    act:     (params, version, env_state, obs, memory, key, env_steps) -> Acted
    learn_step: the learner's half; on-policy `make_learn`'s, off-policy
             `make_replay_learn`'s
    advance: off-policy: (window, trajectory) -> the next window (None on-policy)
    """

    init: Callable
    tick: Callable
    chunk: Callable[[int], Callable]
    rollout: Callable
    learn: Callable
    act: Callable
    learn_step: Callable
    advance: Callable | None
    obs_stats: Callable  # env_state -> the observation statistics (None: not normalised)
    specs: PipelineState  # how each field is split over the mesh
    mesh: jax.sharding.Mesh
    # act and learn_step as functions of one device's shards, not yet mapped over the
    # mesh, for programs that place them on devices of their own (split.py)
    local_act: Callable | None = None
    local_learn: Callable | None = None


def make_pipeline(agent: Agent, env, env_params, rollout_len: int, num_envs: int, *,
                  unroll: int = 1, lag: int = 0, max_staleness: int = -1,
                  mesh: jax.sharding.Mesh | None = None, replay: Any = None,
                  total_steps: int = 1) -> Pipeline:
    """`env` is batched (a VecEnv, possibly wrapped); its info carries episode statistics.

    Off-policy agents (`agent.data == "replay"`) need `replay`, a ReplayConfig, and
    `total_steps`, the run's env steps (importance-weight annealing). `max_staleness`
    >= 0 skips (masks) a learner update whose data was produced by parameters more
    than that many updates old; -1 never skips.
    """
    if lag < 0:
        raise ValueError(f"lag must be >= 0, got {lag}")
    mesh = make_mesh(1) if mesh is None else mesh
    if num_envs % mesh.size:
        raise ValueError(f"{num_envs} envs do not split over {mesh.size} devices")
    local_envs = num_envs // mesh.size
    offpolicy = agent.data == "replay"
    if offpolicy and replay is None:
        raise ValueError("an off-policy agent needs a replay config")
    stage = (make_replay_stage(agent.replay, replay, mesh.size, total_steps, AXIS)
             if offpolicy else None)
    rollout = make_rollout(agent, env, env_params, rollout_len, num_envs, local_envs, unroll)
    act = make_act(rollout, rollout_len * num_envs)
    specs = state_specs(env, lag, offpolicy, agent.recurrent)
    env_spec, memory_spec = env.partition_spec(AXIS), specs.memory
    acted_specs = Acted(env_spec, P(AXIS), memory_spec, P(), P(), P(None, AXIS), P(), P(), P())
    traj_spec = P(None, AXIS)
    if offpolicy:
        learn = make_replay_learn(stage, agent.learn, env.observe)
        tick = make_replay_tick(act, learn, stage.advance, env.obs_stats)
        learn_specs = ((P(), P(), P(AXIS), traj_spec, P(), P(), P(), P()),
                       (P(), P(), P(AXIS), P()))
    else:
        learn = make_learn(agent, max_staleness)
        tick = make_sync_tick(act, learn) if lag == 0 else make_async_tick(act, learn)
        learn_specs = ((P(), P(), traj_spec, P(), P()), (P(), P(), P()))

    def on_mesh(f, in_specs, out_specs):
        # check_vma=False: the pipeline reduces over devices explicitly (gradients in
        # `flat_grad_step`, statistics with psum/pmean), so it needs no varying-type
        # tracking, and env code written without shard_map in mind (a lax.cond branch or a
        # loop carry that is a constant on one side and per-device data on the other, as
        # in most suites) traces as it is.
        return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                             check_vma=False)

    return Pipeline(
        init=on_mesh(make_init(agent, env, env_params, rollout, rollout_len, num_envs,
                               local_envs, lag, stage), (P(),), specs),
        tick=on_mesh(tick, (specs,), (specs, P())),
        chunk=lambda num_ticks: on_mesh(make_chunk(tick, num_ticks), (specs,), (specs, P())),
        rollout=on_mesh(rollout, (P(), env_spec, P(AXIS), memory_spec, P()),
                        (env_spec, P(AXIS), memory_spec, traj_spec, P())),
        learn=on_mesh(agent.learn, (P(), traj_spec, P()), (P(), P())),
        act=on_mesh(act, (P(), P(), env_spec, P(AXIS), memory_spec, P(), P()), acted_specs),
        learn_step=on_mesh(learn, *learn_specs),
        advance=on_mesh(stage.advance, (traj_spec, traj_spec), traj_spec) if offpolicy
        else None,
        obs_stats=env.obs_stats, specs=specs, mesh=mesh, local_act=act, local_learn=learn)


def vmap_seeds(pipeline: Pipeline) -> Pipeline:
    """The pipeline over a leading seed axis: init takes keys [N], the chunk maps over
    N states (each seed its own envs, replay and parameters) in one program.

    Seed k equals a run with seed k alone up to float rounding: vmapped matmuls and
    reductions may associate differently (measured: parameters within 1e-6).
    """
    return pipeline._replace(
        init=jax.vmap(pipeline.init),
        chunk=lambda num_ticks: jax.vmap(pipeline.chunk(num_ticks)))


def seed_keys(seed: int, num_seeds: int, impl: str, seeds=None):
    """Keys [N] equal to jax.random.key(seed + k, impl) for each k, or to
    jax.random.key(seeds[k], impl) where the runs' seeds are given."""
    seeds = range(seed, seed + num_seeds) if seeds is None else seeds
    return jax.vmap(lambda s: jax.random.key(s, impl=impl))(jnp.asarray(seeds, jnp.uint32))


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


def compile_init(lowered, options: dict | None = None):
    """A lowered init compiled for compile time, not run time: it runs once. On CPU, XLA's
    older fusion emitters compile it about twice as fast as the default ones (which run
    1.2-2.0x faster, what the chunk needs); with the lowest optimisation level on top."""
    fast = {"xla_backend_optimization_level": 0}
    if jax.default_backend() == "cpu":
        fast["xla_cpu_use_fusion_emitters"] = False
    return lowered.compile(compiler_options={**(options or {}), **fast})


def init_and_compile(pipeline: Pipeline, key, num_ticks: int, options: dict | None = None):
    """(initial state, compiled chunk), compiling the two programs concurrently.

    XLA compiles without holding the GIL, so the chunk (traced from the abstract
    state) compiles in a worker thread while this thread compiles (`compile_init`) and
    runs init.
    """
    init_lowered = jax.jit(pipeline.init).lower(key)
    abstract_state = init_lowered.out_info
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        chunk_future = pool.submit(compile_chunk, pipeline.chunk(num_ticks), abstract_state,
                                   options)
        state = compile_init(init_lowered, options)(key)
        chunk = chunk_future.result()
    return jax.block_until_ready(state), chunk
