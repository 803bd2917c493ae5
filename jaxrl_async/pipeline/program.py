"""The pipeline: a run's programs over a 1-D device mesh, built from an agent and a
batched env.

`make_pipeline` joins the parts, each a module of its own: the actor's rollout
(rollout.py), the tick that puts actor and learner together (ticks.py, with the parameter
queue of param_queue.py and, off-policy, the replay stage of replay/stage.py), and the
state they carry (state.py); then it maps each program over the mesh with
shard_map. The host compiles the chunk of K ticks once, state donated (`compile_chunk`),
and calls it until the run is done.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from jaxrl_async.pipeline.param_queue import queue_init
from jaxrl_async.pipeline.rollout import env_keys, make_rollout
from jaxrl_async.pipeline.sharding import AXIS, make_mesh
from jaxrl_async.pipeline.state import PipelineShape, PipelineState, state_specs
from jaxrl_async.pipeline.ticks import (
    Acted,
    ActorState,
    ReplayInputs,
    make_act,
    make_async_tick,
    make_chunk,
    make_learn,
    make_replay_learn,
    make_replay_tick,
    make_sync_tick,
)
from jaxrl_async.replay.stage import make_replay_stage
from jaxrl_async.types import Agent, LearnFn, ReplayUse

__all__ = [
    "DETERMINISTIC_OPTIONS",
    "Pipeline",
    "PipelineShape",
    "PipelineState",
    "compile_chunk",
    "compile_init",
    "init_and_compile",
    "init_options",
    "make_init",
    "make_pipeline",
    "seed_keys",
    "vmap_seeds",
]


def prefill_in_flight(state: PipelineState, key, rollout: Callable) -> PipelineState:
    """On-policy at lag >= 1: one rollout in flight for the first tick to learn on."""
    env_state, obs, memory, traj, _ = rollout(
        state.learner.params, state.env_state, state.obs, state.memory, key
    )
    return state.replace(
        env_state=env_state, obs=obs, memory=memory, in_flight=traj, in_flight_version=jnp.int32(0)
    )


def prefill_replay(state: PipelineState, key, rollout: Callable, stage) -> PipelineState:
    """Off-policy: an empty replay per device and a first window, `rollout` being one of
    T + n - 1 steps (T + L - stride for sequences)."""
    env_state, obs, memory, window, _ = rollout(
        state.learner.params, state.env_state, state.obs, state.memory, key
    )
    replay = jax.tree.map(lambda x: x[None], stage.init(stage.example(window)))
    return state.replace(env_state=env_state, obs=obs, memory=memory, replay=replay, window=window)


def make_init(
    agent: Agent, env, env_params, local_envs: int, lag: int, prefill: Callable | None = None
) -> Callable:
    """init(key) -> PipelineState: reset the envs, initialise the learner, fill the
    parameter queue with the initial parameters, and prefill what the first tick
    consumes (not counted in env_steps): `prefill(state, key) -> state`, None where the
    first tick consumes nothing made before it (on-policy at lag 0)."""

    def init(key):
        reset_key, agent_key, key = jax.random.split(key, 3)
        obs, env_state = env.reset(env_keys(reset_key, local_envs), env_params)
        learner = agent.init(agent_key)
        state = PipelineState(
            learner,
            env_state,
            obs,
            key,
            jnp.int32(0),
            jnp.int32(0),
            memory=agent.initial_memory(local_envs),
        )
        if lag:
            state = state.replace(actor_queue=queue_init(learner.params, lag))
        if prefill is None:
            return state
        key, prefill_key = jax.random.split(key)
        return prefill(state.replace(key=key), prefill_key)

    return init


class Pipeline(NamedTuple):
    """Device-parallel programs over a 1-D mesh (axis AXIS); one device is a mesh of one.

    init:    key -> PipelineState (placed on the mesh)
    tick:    state -> (state, metrics)
    chunk:   num_ticks -> (state -> (state, metrics [K])), the program the host calls
    rollout: (params, env_state, obs, memory, key) -> (env_state, obs, memory, trajectory,
             episode stats); memory is None for a memoryless agent
    learn:   (learner_state, trajectory, key) -> LearnOutput(learner_state, metrics, None),
             the agent's update with the trajectory split over the mesh
    The halves of an asynchronous tick on this mesh, for split placement (split.py):
    act:     (params, version, ActorState) -> Acted
    learn_step: the learner's half; on-policy `make_learn`'s, off-policy
             `make_replay_learn`'s
    advance: off-policy: (window, trajectory) -> the next window (None on-policy)
    """

    init: Callable
    tick: Callable
    chunk: Callable[[int], Callable]
    rollout: Callable
    learn: LearnFn
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


def on_mesh(mesh: jax.sharding.Mesh, f: Callable, in_specs, out_specs) -> Callable:
    """`f`, written for one device's shards, mapped over `mesh`.

    check_vma=False: the pipeline reduces over devices explicitly (gradients in
    `flat_grad_step`, statistics with psum/pmean), so it needs no varying-type tracking,
    and env code written without shard_map in mind (a lax.cond branch or a loop carry
    that is a constant on one side and per-device data on the other, as in most suites)
    traces as it is."""
    return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)


def make_pipeline(
    agent: Agent,
    env,
    env_params,
    shape: PipelineShape,
    *,
    mesh: jax.sharding.Mesh | None = None,
    replay=None,
) -> Pipeline:
    """`env` is batched (a VecEnv, possibly wrapped); its info carries episode statistics.

    Off-policy agents (`agent.data == "replay"`) need `replay`, a ReplayConfig.
    """
    mesh = make_mesh(1) if mesh is None else mesh
    local_envs = _local_envs(shape, mesh)
    use = _replay_use(agent, replay)  # None: an on-policy agent
    offpolicy = use is not None
    rollout = make_rollout(agent, env, env_params, shape, local_envs)
    act = make_act(rollout, shape.tick_steps)
    prefill = functools.partial(prefill_in_flight, rollout=rollout) if shape.lag else None
    if use is not None:
        stage = make_replay_stage(use, replay, mesh.size, shape.total_steps, AXIS)
        window_rollout = make_rollout(
            agent,
            env,
            env_params,
            dataclasses.replace(shape, rollout_len=shape.rollout_len + stage.carried),
            local_envs,
        )
        prefill = functools.partial(prefill_replay, rollout=window_rollout, stage=stage)
        learn = make_replay_learn(stage, agent.learn, env.observe)
        tick = make_replay_tick(act, learn, stage.advance, env.obs_stats)
    else:
        stage, learn = None, make_learn(agent, shape.max_staleness)
        tick = make_sync_tick(act, learn) if shape.lag == 0 else make_async_tick(act, learn)
    specs = state_specs(env, shape.lag, offpolicy, agent.recurrent)
    init = make_init(agent, env, env_params, local_envs, shape.lag, prefill)
    return _map_over_mesh(
        mesh,
        env,
        specs,
        Pipeline(
            init=init,
            tick=tick,
            chunk=functools.partial(make_chunk, tick),
            rollout=rollout,
            learn=agent.learn,
            act=act,
            learn_step=learn,
            advance=None if stage is None else stage.advance,
            obs_stats=env.obs_stats,
            specs=specs,
            mesh=mesh,
            local_act=act,
            local_learn=learn,
        ),
    )


def _local_envs(shape: PipelineShape, mesh: jax.sharding.Mesh) -> int:
    """The envs each device of `mesh` holds; a ValueError for a shape the mesh cannot run."""
    if shape.lag < 0:
        raise ValueError(f"lag must be >= 0, got {shape.lag}")
    if shape.num_envs % mesh.size:
        raise ValueError(f"{shape.num_envs} envs do not split over {mesh.size} devices")
    return shape.num_envs // mesh.size


def _replay_use(agent: Agent, replay) -> ReplayUse | None:
    """How an off-policy agent (`data == "replay"`) asks for replay; None for an on-policy one."""
    if agent.data != "replay":
        return None
    if replay is None:
        raise ValueError("an off-policy agent needs a replay config")
    if agent.replay is None:
        raise ValueError('an agent with data="replay" must set Agent.replay (a ReplayUse)')
    return agent.replay


def _map_over_mesh(mesh, env, specs: PipelineState, local: Pipeline) -> Pipeline:
    """The pipeline's programs, given as functions of one device's shards (`local`), each
    mapped over `mesh`."""
    env_spec, memory_spec, traj_spec = env.partition_spec(AXIS), specs.memory, P(None, AXIS)
    actor_specs = ActorState(env_spec, P(AXIS), memory_spec, P(), P())
    acted_specs = Acted(env_spec, P(AXIS), memory_spec, P(), P(), traj_spec, P(), P(), P())
    # (in_specs, out_specs) of the learner's half: replay's or the double buffer's
    learn_specs: tuple[tuple, tuple]
    if local.advance is not None:
        learn_specs = (
            (P(), P(), P(AXIS), traj_spec, ReplayInputs(P(), P(), P(), P())),
            (P(), P(), P(AXIS), P()),
        )
    else:
        learn_specs = ((P(), P(), traj_spec, P(), P()), (P(), P(), P()))
    return local._replace(
        init=on_mesh(mesh, local.init, (P(),), specs),
        tick=on_mesh(mesh, local.tick, (specs,), (specs, P())),
        chunk=lambda num_ticks: on_mesh(mesh, local.chunk(num_ticks), (specs,), (specs, P())),
        rollout=on_mesh(
            mesh,
            local.rollout,
            (P(), env_spec, P(AXIS), memory_spec, P()),
            (env_spec, P(AXIS), memory_spec, traj_spec, P()),
        ),
        learn=on_mesh(mesh, local.learn, (P(), traj_spec, P()), P()),  # all replicated
        act=on_mesh(mesh, local.act, (P(), P(), actor_specs), acted_specs),
        learn_step=on_mesh(mesh, local.learn_step, *learn_specs),
        advance=None
        if local.advance is None
        else on_mesh(mesh, local.advance, (traj_spec, traj_spec), traj_spec),
    )


def vmap_seeds(pipeline: Pipeline) -> Pipeline:
    """The pipeline over a leading seed axis: init takes keys [N], the chunk maps over
    N states (each seed its own envs, replay and parameters) in one program.

    Seed k equals a run with seed k alone up to float rounding: vmapped matmuls and
    reductions may associate differently (measured: parameters within 1e-6).
    """
    return pipeline._replace(
        init=jax.vmap(pipeline.init), chunk=lambda num_ticks: jax.vmap(pipeline.chunk(num_ticks))
    )


def seed_keys(seed: int, num_seeds: int, impl: str, seeds=None):
    """Keys [N] equal to jax.random.key(seed + k, impl) for each k, or to
    jax.random.key(seeds[k], impl) where the runs' seeds are given."""
    seeds = range(seed, seed + num_seeds) if seeds is None else seeds
    return jax.vmap(lambda s: jax.random.key(s, impl=impl))(jnp.asarray(seeds, jnp.uint32))


# XLA options for bitwise run-to-run reproducibility (train.deterministic). XLA on CPU is
# deterministic already (same program, same device count: same bits); on GPUs these make
# scatters and reductions deterministic or refuse to compile ops that cannot be.
DETERMINISTIC_OPTIONS = {
    "xla_gpu_deterministic_ops": True,
    "xla_gpu_exclude_nondeterministic_ops": True,
}


def compile_chunk(chunk, state, options: dict | None = None) -> Callable:
    """Trace and compile ahead of time with the state donated; `state` may be abstract.
    `options` are XLA compiler options (DETERMINISTIC_OPTIONS)."""
    return jax.jit(chunk, donate_argnums=0).lower(state).compile(compiler_options=options)


def init_options(platform: str, options: dict | None = None) -> dict:
    """XLA options for compiling init on `platform` ("cpu", "gpu", "cuda", ...): `options`,
    and on CPU only, the lowest optimisation level and XLA's older fusion emitters, which
    compile it faster than the default ones (those run faster, what the chunk needs; see
    docs/performance.md). Other platforms were not measured, so they keep XLA's defaults."""
    fast = {}
    if platform == "cpu":
        fast = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}
    return {**(options or {}), **fast}


def compile_init(lowered, options: dict | None = None):
    """A lowered init compiled for compile time, not run time: it runs once."""
    return lowered.compile(compiler_options=init_options(jax.default_backend(), options))


def init_and_compile(pipeline: Pipeline, key, num_ticks: int, options: dict | None = None):
    """(initial state, compiled chunk), compiling the two programs concurrently.

    XLA compiles without holding the GIL, so the chunk (traced from the abstract
    state) compiles in a worker thread while this thread compiles (`compile_init`) and
    runs init.
    """
    init_lowered = jax.jit(pipeline.init).lower(key)
    abstract_state = init_lowered.out_info
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        chunk_future = pool.submit(
            compile_chunk, pipeline.chunk(num_ticks), abstract_state, options
        )
        state = compile_init(init_lowered, options)(key)
        chunk = chunk_future.result()
    return jax.block_until_ready(state), chunk
