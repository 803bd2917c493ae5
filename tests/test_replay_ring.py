"""`replay.ring` against a plain-Python ring: add, wrap-around, uniform sampling of filled slots."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxrl_async.replay import ring


def example_item():
    return {"obs": jnp.zeros((3,), jnp.float32), "action": jnp.int32(0)}


def make_items(start, batch):
    """Items numbered start, start+1, ...: obs = [n, n+0.5, -n], action = n."""
    n = np.arange(start, start + batch)
    return {
        "obs": jnp.asarray(np.stack([n, n + 0.5, -n], 1), jnp.float32),
        "action": jnp.asarray(n, jnp.int32),
    }


class PythonRing:
    """The reference: a list of slots written one item at a time."""

    def __init__(self, capacity):
        self.slots = [None] * capacity
        self.position = 0
        self.size = 0

    def add(self, numbers):
        for n in numbers:
            self.slots[self.position] = n
            self.position = (self.position + 1) % len(self.slots)
            self.size = min(self.size + 1, len(self.slots))


def test_init_is_empty_with_the_item_spec():
    state = ring.init(7, example_item())
    assert ring.capacity(state) == 7
    assert state.items["obs"].shape == (7, 3) and state.items["obs"].dtype == jnp.float32
    assert state.items["action"].shape == (7,) and state.items["action"].dtype == jnp.int32
    assert int(ring.size(state)) == 0 and not bool(ring.can_sample(state))


@pytest.mark.parametrize("capacity", [1, 5, 16])
def test_add_wraps_around_like_a_python_ring(capacity):
    rng = np.random.default_rng(capacity)
    state, reference, added = ring.init(capacity, example_item()), PythonRing(capacity), 0
    add = jax.jit(ring.add)
    for _ in range(12):
        batch = int(rng.choice([1, 3, 2 * capacity + 1]))  # the last exceeds the capacity
        state = add(state, make_items(added, batch))
        reference.add(range(added, added + batch))
        added += batch
        assert int(state.position) == reference.position
        assert int(state.size) == reference.size
        filled = [n for n in reference.slots if n is not None]
        np.testing.assert_array_equal(np.asarray(state.items["action"])[: len(filled)], filled)
        np.testing.assert_array_equal(
            np.asarray(state.items["obs"])[: len(filled)],
            np.asarray(make_items(0, added)["obs"])[filled],
        )
        # The newest items, in insertion order.
        for age in range(min(3, reference.size)):
            assert int(ring.latest(state, age)["action"]) == added - 1 - age


def test_sample_draws_only_filled_slots_uniformly():
    capacity, filled = 50, 20
    state = ring.add(ring.init(capacity, example_item()), make_items(100, filled))
    draws = jax.jit(lambda key: ring.sample(state, key, 1000))
    samples = [draws(key) for key in jax.random.split(jax.random.key(0), 20)]
    indices = np.concatenate([np.asarray(s.indices) for s in samples])
    assert indices.min() >= 0 and indices.max() < filled
    # The items are the stored ones, and the uniform sample reports P = 1/size and w = 1.
    for s in samples[:2]:
        np.testing.assert_array_equal(np.asarray(s.items["action"]), 100 + np.asarray(s.indices))
        np.testing.assert_allclose(np.asarray(s.probabilities), 1 / filled)
        np.testing.assert_array_equal(np.asarray(s.weights), 1.0)
    counts = np.bincount(indices, minlength=filled)
    assert stats.chisquare(counts).pvalue > 1e-3


def test_sample_after_wrap_covers_the_whole_buffer():
    state = ring.init(8, example_item())
    state = ring.add(ring.add(state, make_items(0, 6)), make_items(6, 6))
    sample = ring.sample(state, jax.random.key(1), 4000)
    assert set(np.asarray(sample.items["action"]).tolist()) == set(range(4, 12))


def test_add_rejects_items_that_do_not_match_the_spec():
    state = ring.init(4, example_item())
    with pytest.raises(ValueError, match=r"ring.add"):
        ring.add(state, {"obs": jnp.zeros((2, 4)), "action": jnp.zeros((2,), jnp.int32)})
    with pytest.raises(ValueError, match=r"ring.add"):
        ring.add(state, {"obs": jnp.zeros((2, 3)), "action": jnp.zeros((2,), jnp.float32)})
    with pytest.raises(ValueError, match="batch size"):
        ring.add(state, {"obs": jnp.zeros((2, 3)), "action": jnp.zeros((3,), jnp.int32)})
    with pytest.raises(ValueError, match="structure"):
        ring.add(state, {"obs": jnp.zeros((2, 3))})
    with pytest.raises(ValueError, match="capacity"):
        ring.init(0, example_item())


def test_donated_add_writes_in_place():
    # 100k slots, 64 written: the compiled add must alias the buffer, not copy it.
    state = ring.init(100_000, example_item())
    compiled = jax.jit(ring.add, donate_argnums=0).lower(state, make_items(0, 64)).compile()
    memory = compiled.memory_analysis()
    buffer_bytes = sum(x.nbytes for x in jax.tree.leaves(state.items))
    assert memory.alias_size_in_bytes >= buffer_bytes
    assert memory.temp_size_in_bytes < buffer_bytes // 100


def test_jit_equals_eager_and_vmap_equals_loop():
    keys = jax.random.split(jax.random.key(2), 4)

    def run(key, items_a, items_b):
        state = ring.add(ring.add(ring.init(6, example_item()), items_a), items_b)
        return state, ring.sample(state, key, 9)

    # Four independent buffers (vmap needs their batches to stack).
    first = jax.tree.map(lambda *x: jnp.stack(x), *[make_items(10 * b, 4) for b in range(4)])
    second = jax.tree.map(lambda *x: jnp.stack(x), *[make_items(100 + 10 * b, 5) for b in range(4)])
    vmapped = jax.jit(jax.vmap(run))(keys, first, second)
    for b in range(4):
        one = jax.tree.map(lambda x: x[b], (first, second))
        eager = run(keys[b], *one)
        jitted = jax.jit(run)(keys[b], *one)
        for got in (jitted, jax.tree.map(lambda x: x[b], vmapped)):
            for a, e in zip(jax.tree.leaves(got), jax.tree.leaves(eager)):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(e))
