"""Actor–learner split placement: actors on one group of devices, the learner on another.

The fused pipeline runs a whole tick as one program, where the actor's half and the
learner's half could overlap but on CPU do not. Here the host runs the same
`pipeline.async_tick` with its halves compiled on two meshes: `act` on the actor mesh,
`learn_step` on the learner mesh, the parameter queue's push on the actor mesh.
Dispatch does not wait, so the halves run at the same time; parameters and
trajectories move between the groups device to device. The randomness and the
arithmetic are those of the fused tick at the same lag, so both placements end in
the same state (to float rounding).
"""

from __future__ import annotations

import concurrent.futures
import functools

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrl_async.pipeline import Pipeline, async_tick, queue_oldest, queue_push
from jaxrl_async.sharding import AXIS


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
    to_actor = functools.partial(jax.device_put, device=NamedSharding(actor.mesh, P()))

    def to_learner(x, spec=P()):
        return jax.device_put(x, NamedSharding(learner.mesh, spec))

    state = jax.jit(actor.init)(key)  # the learner's parts move to the learner mesh
    state = state.replace(
        learner=to_learner(state.learner), updates=to_learner(state.updates),
        in_flight=to_learner(state.in_flight, P(None, AXIS)),
        in_flight_version=to_learner(state.in_flight_version))

    params, version = jax.eval_shape(queue_oldest, state.actor_queue)
    on_actor = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,  # noqa: E731
                                              sharding=NamedSharding(actor.mesh, P()))
    params, version = jax.tree.map(on_actor, (params, version))
    act_lowered = jax.jit(actor.act).lower(params, version, state.env_state, state.obs,
                                           state.key, state.env_steps)
    learn_key = act_lowered.out_info.learn_key
    learn_key = jax.ShapeDtypeStruct(learn_key.shape, learn_key.dtype,
                                     sharding=NamedSharding(learner.mesh, P()))
    learn_lowered = jax.jit(learner.learn_step, donate_argnums=0).lower(
        state.learner, state.updates, state.in_flight, state.in_flight_version, learn_key)
    push_lowered = jax.jit(queue_push, donate_argnums=0).lower(state.actor_queue, params,
                                                               version)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:  # XLA compiles without the GIL
        act, learn, push = pool.map(lambda lowered: lowered.compile(options),
                                    (act_lowered, learn_lowered, push_lowered))
    tick = functools.partial(async_tick, act=act, learn=learn, push=push, to_actor=to_actor,
                             to_learner=to_learner)

    def chunk(state):
        """num_ticks ticks, dispatched without waiting; metrics as lists per key."""
        ticks = []
        for _ in range(num_ticks):
            state, metrics = tick(state)
            ticks.append(metrics)
        return state, {k: [m[k] for m in ticks] for k in ticks[0]}

    return jax.block_until_ready(state), chunk
