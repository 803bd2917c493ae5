"""Actor–learner split placement: actors on one group of devices, the learner on another.

The fused pipeline runs a whole tick as one program, where the actor's half and the
learner's half could overlap but on CPU do not. Split placement runs the halves of the
same tick (`ticks.async_tick`'s, or `ticks.replay_tick`'s for off-policy agents)
on different devices at once, in one of two ways:

- One program (on-policy agents, one actor and one learner device): the chunk runs on
  a mesh of the two devices. In each tick device 0 takes the actor's branch and device
  1 the learner's; then one all-gather of their outputs, packed as 32-bit words, gives
  both devices the whole new state, so the state stays replicated and the host reads,
  checkpoints and restores it like any other. No host round trip per tick.
- Host-dispatched (off-policy agents, or more devices in a group): the host runs the
  tick with its halves compiled on two meshes (`act` and the parameter queue's push on
  the actor mesh, `learn_step` and the replay window's `advance` on the learner mesh).
  Dispatch does not wait, so the halves run at the same time; parameters and
  trajectories move between the groups device to device. The replay stays on the
  learner's devices.

The randomness and the arithmetic are those of the fused tick at the same lag, so both
placements end in the same state (to float rounding; the one-program split measured
bitwise equal).
"""

from __future__ import annotations

import concurrent.futures
import functools
import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrl_async.pipeline.param_queue import queue_oldest, queue_push
from jaxrl_async.pipeline.program import Pipeline, compile_chunk, compile_init
from jaxrl_async.pipeline.sharding import AXIS, lower_mulhi_on_meshes
from jaxrl_async.pipeline.ticks import (
    Halves,
    ReplayInputs,
    acted_fields,
    actor_state,
    async_tick,
    make_chunk,
    replay_tick,
)
from jaxrl_async.run.divergence import param_abs_max

REPLICATED = P()
PLACE = "place"  # the axis of the one-program split's mesh: (actor device, learner device)


def split_meshes(num_devices: int, actor_devices: int):
    """(actor mesh, learner mesh) over the first num_devices local devices."""
    lower_mulhi_on_meshes()  # Philox keys in these programs over several devices
    devices = jax.local_devices()[:num_devices]
    actor, learner = devices[:actor_devices], devices[actor_devices:]
    return (
        jax.make_mesh((len(actor),), (AXIS,), devices=actor),
        jax.make_mesh((len(learner),), (AXIS,), devices=learner),
    )


def init_and_compile_split(
    actor: Pipeline, learner: Pipeline, key, num_ticks: int, options: dict | None = None
):
    """(initial state, chunk): chunk(state) -> (state, metrics of num_ticks ticks).

    `actor` and `learner` are the same pipeline (lag >= 1) built on the two meshes.
    Both are initialised from `key`; every env draws its randomness from its global
    index, so the two inits agree and each half keeps the fields it owns, laid out on
    its own mesh (an off-policy learner's replay holds one shard per learner device).
    """
    offpolicy = learner.advance is not None
    if not offpolicy and actor.mesh.size == 1 and learner.mesh.size == 1:
        return _init_and_compile_one_program(actor, learner, key, num_ticks, options)
    state = _init_split(actor, learner, key, options)
    abs_max = jax.jit(param_abs_max)
    tick = functools.partial(
        replay_tick if offpolicy else async_tick,
        halves=_compile_halves(actor, learner, state, options),
    )

    def chunk(state):
        """num_ticks ticks, dispatched without waiting; metrics as lists per key (the
        learner's param_abs_max once, after the last tick)."""
        ticks = []
        for _ in range(num_ticks):
            state, metrics = tick(state)
            ticks.append(metrics)
        checked = {"param_abs_max": [abs_max(state.learner.params)]}
        return state, {**{k: [m[k] for m in ticks] for k in ticks[0]}, **checked}

    return jax.block_until_ready(state), chunk


def _on(mesh, spec=REPLICATED):
    """x -> an abstract value like x laid out on `mesh` as `spec`."""
    return lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, spec))


def _init_split(actor: Pipeline, learner: Pipeline, key, options: dict | None):
    """The initial state: the actor's fields from the actor's init, laid out on its mesh,
    the learner's from the learner's."""
    state, learner_state = (
        compile_init(jax.jit(p.init).lower(key), options)(key) for p in (actor, learner)
    )
    owned = (
        ("learner", "updates", "replay", "window")
        if learner.advance is not None
        else ("learner", "updates", "in_flight", "in_flight_version")
    )
    return state.replace(**{name: getattr(learner_state, name) for name in owned})


def _compile_halves(actor: Pipeline, learner: Pipeline, state, options: dict | None) -> Halves:
    """The tick's halves, each compiled on its group's mesh (all at once), and the moves
    between the groups."""
    offpolicy = learner.advance is not None
    to_actor = functools.partial(jax.device_put, device=NamedSharding(actor.mesh, P()))

    def to_learner(x, spec=REPLICATED):
        return jax.device_put(x, NamedSharding(learner.mesh, spec))

    params, version = jax.tree.map(_on(actor.mesh), jax.eval_shape(queue_oldest, state.actor_queue))
    act_lowered = jax.jit(actor.act).lower(params, version, actor_state(state))
    acted = act_lowered.out_info
    scalar = _on(learner.mesh)
    lowered = [
        act_lowered,
        jax.jit(queue_push, donate_argnums=0).lower(state.actor_queue, params, version),
        jax.jit(queue_oldest).lower(state.actor_queue),
    ]
    if learner.advance is not None:  # off-policy
        given = ReplayInputs(
            scalar(state.env_steps),
            scalar(version),
            jax.tree.map(scalar, learner.obs_stats(state.env_state)),
            scalar(acted.learn_key),
        )
        lowered.append(
            jax.jit(learner.learn_step, donate_argnums=(0, 2)).lower(
                state.learner, state.updates, state.replay, state.window, given
            )
        )
        lowered.append(
            jax.jit(learner.advance, donate_argnums=0).lower(
                state.window, jax.tree.map(_on(learner.mesh, P(None, AXIS)), acted.traj)
            )
        )
    else:
        lowered.append(
            jax.jit(learner.learn_step, donate_argnums=0).lower(
                state.learner,
                state.updates,
                state.in_flight,
                state.in_flight_version,
                scalar(acted.learn_key),
            )
        )
    with concurrent.futures.ThreadPoolExecutor(len(lowered)) as pool:  # compiles drop the GIL
        compiled = list(pool.map(lambda lowered: lowered.compile(options), lowered))
    act, push, oldest, learn = compiled[:4]
    return Halves(
        act=act,
        learn=learn,
        push=push,
        oldest=oldest,
        to_actor=to_actor,
        to_learner=to_learner,
        advance=compiled[4] if offpolicy else None,
        obs_stats=learner.obs_stats if offpolicy else None,
    )


# ------------------------------------------------------------------ one-program split


def _init_and_compile_one_program(
    actor: Pipeline, learner: Pipeline, key, num_ticks: int, options: dict | None
):
    """(state replicated on both devices, chunk) for one actor and one learner device."""
    mesh = jax.make_mesh(
        (2,), (PLACE,), devices=[*actor.mesh.devices.flat, *learner.mesh.devices.flat]
    )
    act, learn = _per_device(actor.local_act), _per_device(actor.local_learn)

    def tick(state):
        params, version = queue_oldest(state.actor_queue)
        act_args = (params, version, actor_state(state))
        # the learner's key, as the actor's half splits it (ticks.make_act)
        learn_args = (
            state.learner,
            state.updates,
            state.in_flight,
            state.in_flight_version,
            jax.random.split(state.key, 3)[2],
        )
        impl = jax.random.key_impl(state.key)  # every key of a run is of the run's PRNG
        acted_words = _Words(jax.eval_shape(act, *act_args), impl)
        learned_words = _Words(jax.eval_shape(learn, *learn_args), impl)
        size = max(acted_words.size, learned_words.size)
        # Each device runs one branch; no collective inside a branch, so neither waits there.
        mine = jax.lax.cond(
            jax.lax.axis_index(PLACE) == 0,
            lambda: acted_words.pack(act(*act_args), size),
            lambda: learned_words.pack(learn(*learn_args), size),
        )
        both = jax.lax.all_gather(mine, PLACE)  # the tick's one exchange
        acted = acted_words.unpack(both[0])
        learner, updates, metrics = learned_words.unpack(both[1])
        queue = queue_push(state.actor_queue, learner.params, updates)
        state = state.replace(
            learner=learner,
            updates=updates,
            **acted_fields(acted),
            actor_queue=queue,
            in_flight=acted.traj,
            in_flight_version=acted.version,
        )
        return state, {**metrics, **acted.stats}

    chunk = jax.shard_map(
        make_chunk(tick, num_ticks),
        mesh=mesh,
        in_specs=(P(),),
        out_specs=(P(), P()),
        check_vma=False,
    )
    state = jax.device_put(
        compile_init(jax.jit(actor.init).lower(key), options)(key), NamedSharding(mesh, P())
    )
    return jax.block_until_ready(state), compile_chunk(chunk, state, options)


def _per_device(f):
    """`f`, written for one device's shards of a mesh axis AXIS, as a plain function of one
    device's arrays: AXIS becomes a vmapped axis of size 1, so its psums and axis_index
    involve no other device."""

    def on_one_device(*args):
        out = jax.vmap(
            lambda _, *a: f(*a), in_axes=(0, *[None] * len(args)), axis_name=AXIS, axis_size=1
        )(jnp.zeros(1), *args)
        return jax.tree.map(lambda x: x[0], out)

    return on_one_device


class _Words:
    """Trees shaped like `example` (abstract; its keys of PRNG `impl`) to one uint32 vector
    and back, bit for bit, so one all-gather moves a whole half's outputs."""

    def __init__(self, example, impl):
        self.impl = impl
        leaves, self.treedef = jax.tree.flatten(example)
        self.leaves = leaves  # one 32-bit word per element (per word of a key's data)
        self.sizes = [
            math.prod(
                jax.eval_shape(jax.random.key_data, x).shape
                if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
                else x.shape
            )
            for x in leaves
        ]
        self.size = sum(self.sizes)

    @staticmethod
    def _encode(x):
        if x.dtype.itemsize != 4:  # bool, 8- and 16-bit: widened exactly
            x = x.astype(jnp.float32 if jnp.issubdtype(x.dtype, jnp.floating) else jnp.int32)
        return jax.lax.bitcast_convert_type(x.reshape(-1), jnp.uint32)

    def pack(self, tree, size: int):
        words = []
        for x in jax.tree.leaves(tree):
            if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
                x = jax.random.key_data(x)
            words.append(self._encode(x))
        flat = jnp.concatenate(words) if words else jnp.zeros(0, jnp.uint32)
        return jnp.pad(flat, (0, size - flat.size))

    def unpack(self, flat):
        out, at = [], 0
        for x, n in zip(self.leaves, self.sizes):
            words, at = flat[at : at + n], at + n
            if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
                data = jax.eval_shape(jax.random.key_data, x)
                out.append(
                    jax.random.wrap_key_data(
                        jax.lax.bitcast_convert_type(words, data.dtype).reshape(data.shape),
                        impl=self.impl,
                    )
                )
                continue
            wide = jnp.float32 if jnp.issubdtype(x.dtype, jnp.floating) else jnp.int32
            value = jax.lax.bitcast_convert_type(words, wide if x.dtype.itemsize != 4 else x.dtype)
            out.append(value.astype(x.dtype).reshape(x.shape))
        return jax.tree.unflatten(self.treedef, out)
