"""Actor–learner split placement: actors on one group of devices, the learner on another.

The fused pipeline runs a whole tick as one program, where the actor's half and the
learner's half could overlap but on CPU do not. Here the host runs the same tick
function (`pipeline.async_tick`, or `pipeline.replay_tick` for off-policy agents)
with its halves compiled on two meshes: `act` and the parameter queue's push on the
actor mesh, `learn_step` (and the replay window's `advance`) on the learner mesh.
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

from jaxrl_async.pipeline import (Pipeline, async_tick, queue_oldest, queue_push,
                                  replay_tick)
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
    Both are initialised from `key`; every env draws its randomness from its global
    index, so the two inits agree and each half keeps the fields it owns, laid out on
    its own mesh (an off-policy learner's replay holds one shard per learner device).
    """
    offpolicy = learner.advance is not None
    to_actor = functools.partial(jax.device_put, device=NamedSharding(actor.mesh, P()))

    def to_learner(x, spec=P()):
        return jax.device_put(x, NamedSharding(learner.mesh, spec))

    def on(mesh, spec=P()):
        return lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                              sharding=NamedSharding(mesh, spec))

    state, learner_state = jax.jit(actor.init)(key), jax.jit(learner.init)(key)
    owned = ("learner", "updates", "replay", "window") if offpolicy else (
        "learner", "updates", "in_flight", "in_flight_version")
    state = state.replace(**{name: getattr(learner_state, name) for name in owned})

    params, version = jax.tree.map(on(actor.mesh),
                                   jax.eval_shape(queue_oldest, state.actor_queue))
    act_lowered = jax.jit(actor.act).lower(params, version, state.env_state, state.obs,
                                           state.memory, state.key, state.env_steps)
    acted = act_lowered.out_info
    scalar = on(learner.mesh)
    lowered = [act_lowered, jax.jit(queue_push, donate_argnums=0).lower(
        state.actor_queue, params, version), jax.jit(queue_oldest).lower(state.actor_queue)]
    if offpolicy:
        obs_stats = jax.tree.map(scalar, learner.obs_stats(state.env_state))
        lowered.append(jax.jit(learner.learn_step, donate_argnums=(0, 2)).lower(
            state.learner, state.updates, state.replay, state.window, scalar(state.env_steps),
            scalar(version), obs_stats, scalar(acted.learn_key)))
        lowered.append(jax.jit(learner.advance, donate_argnums=0).lower(
            state.window, jax.tree.map(on(learner.mesh, P(None, AXIS)), acted.traj)))
    else:
        lowered.append(jax.jit(learner.learn_step, donate_argnums=0).lower(
            state.learner, state.updates, state.in_flight, state.in_flight_version,
            scalar(acted.learn_key)))
    with concurrent.futures.ThreadPoolExecutor(len(lowered)) as pool:  # compiles drop the GIL
        compiled = list(pool.map(lambda lowered: lowered.compile(options), lowered))
    act, push, oldest, learn = compiled[:4]
    halves = {"act": act, "learn": learn, "push": push, "oldest": oldest,
              "to_actor": to_actor, "to_learner": to_learner}
    if offpolicy:
        tick = functools.partial(replay_tick, advance=compiled[4],
                                 obs_stats=learner.obs_stats, **halves)
    else:
        tick = functools.partial(async_tick, **halves)

    def chunk(state):
        """num_ticks ticks, dispatched without waiting; metrics as lists per key."""
        ticks = []
        for _ in range(num_ticks):
            state, metrics = tick(state)
            ticks.append(metrics)
        return state, {k: [m[k] for m in ticks] for k in ticks[0]}

    return jax.block_until_ready(state), chunk
