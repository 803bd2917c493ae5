"""Actor–learner split placement: actors on one group of devices, the learner on another.

The fused pipeline runs a whole tick as one program, where the actor's half and the
learner's half could overlap but on CPU do not. Here the host dispatches the two
halves of each asynchronous tick (pipeline.act_step on the actor mesh,
pipeline.learn_step on the learner mesh) without waiting, so they run at the same
time; parameters and trajectories move between the groups device to device. The
randomness and the arithmetic are those of the fused tick at the same lag, so both
placements follow the same learning curve (to float rounding).
"""

from __future__ import annotations

import concurrent.futures

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrl_async.pipeline import AXIS, Pipeline, PipelineState


def split_meshes(num_devices: int, actor_devices: int):
    """(actor mesh, learner mesh) over the first num_devices local devices."""
    devices = jax.local_devices()[:num_devices]
    actor, learner = devices[:actor_devices], devices[actor_devices:]
    return (jax.make_mesh((len(actor),), (AXIS,), devices=actor),
            jax.make_mesh((len(learner),), (AXIS,), devices=learner))


def init_and_compile_split(actor: Pipeline, learner: Pipeline, key, num_ticks: int,
                           options: dict | None = None):
    """(initial state, chunk): chunk(state) -> (state, metrics of num_ticks ticks).

    `actor` and `learner` are the same pipeline (lag >= 1) built on the two meshes.
    """
    on_learner = NamedSharding(learner.mesh, P())
    on_actor = NamedSharding(actor.mesh, P())
    traj_on_learner = NamedSharding(learner.mesh, P(None, AXIS))

    state = jax.jit(actor.init)(key)  # learner state and the prefilled trajectory move below
    state = state.replace(
        learner=jax.device_put(state.learner, on_learner),
        updates=jax.device_put(state.updates, on_learner),
        in_flight=jax.device_put(state.in_flight, traj_on_learner),
        in_flight_version=jax.device_put(state.in_flight_version, on_learner))

    act_lowered = jax.jit(actor.act_step).lower(
        state.actor_params, state.actor_versions, state.env_state, state.obs, state.key)
    learn_key = act_lowered.out_info[6]
    learn_key = jax.ShapeDtypeStruct(learn_key.shape, learn_key.dtype, sharding=on_learner)
    learn_lowered = jax.jit(learner.learn_step, donate_argnums=0).lower(
        state.learner, state.updates, state.in_flight, state.in_flight_version, learn_key)
    params_on_actor = jax.tree.map(
        lambda q: jax.ShapeDtypeStruct(q.shape[1:], q.dtype, sharding=on_actor),
        state.actor_params)
    version_on_actor = jax.ShapeDtypeStruct((), state.updates.dtype, sharding=on_actor)
    push_lowered = jax.jit(actor.push, donate_argnums=(0, 1)).lower(
        state.actor_params, state.actor_versions, params_on_actor, version_on_actor)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:  # XLA compiles without the GIL
        act, learn, push = pool.map(lambda lowered: lowered.compile(options),
                                    (act_lowered, learn_lowered, push_lowered))

    def tick(state: PipelineState):
        env_state, obs, traj, stats, version, key, learn_key = act(
            state.actor_params, state.actor_versions, state.env_state, state.obs, state.key)
        learner_state, updates, metrics = learn(
            state.learner, state.updates, state.in_flight, state.in_flight_version,
            jax.device_put(learn_key, on_learner))
        actor_params, actor_versions = push(
            state.actor_params, state.actor_versions,
            jax.device_put(learner_state.params, on_actor), jax.device_put(updates, on_actor))
        state = state.replace(
            learner=learner_state, updates=updates, env_state=env_state, obs=obs, key=key,
            actor_params=actor_params, actor_versions=actor_versions,
            in_flight=jax.device_put(traj, traj_on_learner),
            in_flight_version=jax.device_put(version, on_learner))
        return state, {**metrics, **stats}

    def chunk(state: PipelineState):
        """num_ticks ticks, dispatched without waiting; metrics as lists per key."""
        ticks = []
        for _ in range(num_ticks):
            state, metrics = tick(state)
            ticks.append(metrics)
        return state, {k: [m[k] for m in ticks] for k in ticks[0]}

    return jax.block_until_ready(state), chunk
