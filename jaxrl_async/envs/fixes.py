"""Fixes for gymnax envs that do not trace inside the pipeline's `jax.shard_map`.

shard_map tracks which values vary across devices; a `lax.while_loop` whose initial
carry is a constant but whose body reads per-device data (the env's key) has carry
types that differ and fails to trace. gymnax 1.0.1's Asterix-MinAtar samples a free
entity slot that way, so it could not train at all. `apply(name)` replaces such a
helper with a loop-free one that returns the same values for the same key (tested
against gymnax's own), leaving the env's dynamics and randomness unchanged.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def asterix_free_slot(key: jax.Array, state_entities: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(slot, free) of gymnax's `asterix.while_sample_slots`, without a while_loop.

    `state_entities` [8]: nonzero where a slot is taken. The slots are visited in a
    random order from its second entry on (gymnax never checks the first) up to the
    first free one, or to the last entry when none before it is free; `free` (int32)
    says whether the slot reached is free.
    """
    order = jax.random.permutation(key, jnp.arange(8))
    free = (state_entities[order] == 0)[1:]
    position = jnp.where(jnp.any(free), jnp.argmax(free), 6)  # into order[1:]
    return order[1 + position], free[position].astype(jnp.int32)


def apply(name: str) -> None:
    """Patch the gymnax module of env `name` if it needs it (idempotent)."""
    if name == "Asterix-MinAtar":
        from gymnax.environments.minatar import asterix

        asterix.while_sample_slots = asterix_free_slot
