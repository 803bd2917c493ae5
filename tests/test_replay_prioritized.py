"""`replay.prioritized` and its sum tree against plain-numpy references.

Sampling frequencies by chi-square against the exact p^α / Σ p^α, importance
weights against the formula, duplicate updates, float32 drift over 1e7
updates, jit/vmap equivalence, and sharding over a named axis (vmap here, two
forced CPU devices in a subprocess).
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxrl_async.replay import prioritized, sum_tree

ROOT = Path(__file__).resolve().parents[1]
# Compiled once per shape and shared by the tests (eager dispatch compiles op by op).
add = jax.jit(prioritized.add)
update = jax.jit(prioritized.update_priorities)
draw = jax.jit(prioritized.sample, static_argnums=2)


def example_item():
    return {"obs": jnp.zeros((2,), jnp.float32), "id": jnp.int32(0)}


def numbered_items(start, batch):
    n = np.arange(start, start + batch)
    return {"obs": jnp.asarray(np.stack([n, -n], 1), jnp.float32), "id": jnp.asarray(n, jnp.int32)}


def filled_buffer(capacity, priorities, alpha=0.6):
    """A buffer holding items 0..len(priorities)-1 with those priorities."""
    state = prioritized.init(capacity, example_item(), alpha=alpha)
    return add(state, numbered_items(0, len(priorities)), jnp.asarray(priorities, jnp.float32))


def random_priorities(rng, n, zero_fraction=0.1, low=1e-3, high=1e1):
    p = np.exp(rng.uniform(np.log(low), np.log(high), n))
    p[rng.random(n) < zero_fraction] = 0.0
    return p.astype(np.float32)


def binary_tree_reference(leaves):
    """Every level of a float32 binary sum tree, root first: levels[k] has 2^k nodes."""
    levels = [np.asarray(leaves, np.float32)]
    while levels[-1].size > 1:
        x = levels[-1]
        levels.append((x[0::2] + x[1::2]).astype(np.float32))
    return levels[::-1]


def assert_same(got, expected):
    """Equal pytrees: integers exactly, floats to the last bits XLA's fusion may change."""
    for a, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
        if jnp.issubdtype(e.dtype, jnp.floating):
            np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-6)
        else:
            np.testing.assert_array_equal(np.asarray(a), np.asarray(e))


def assert_tree_is_exact(tree):
    """Each stored level equals the float32 binary tree over the leaves, bit for bit."""
    leaves = np.asarray(tree.leaves)
    reference = binary_tree_reference(leaves)
    positive = np.where(leaves > 0, leaves, np.inf)
    for sums, mins in zip(tree.sums, tree.mins):
        k = sums.shape[0].bit_length() - 1
        np.testing.assert_array_equal(np.asarray(sums), reference[k])
        np.testing.assert_array_equal(np.asarray(mins), positive.reshape(2**k, -1).min(1))
    assert float(sum_tree.total(tree)) == reference[0][0]
    assert float(sum_tree.min_positive(tree)) == positive.min()


def expected_probabilities(priorities, alpha):
    powered = np.where(priorities > 0, np.asarray(priorities, np.float64) ** alpha, 0.0)
    return powered / powered.sum()


def reference_weights(probabilities, drawn, beta, size):
    """w_i = (N·P(i))^-β / max_j (N·P(j))^-β, the max over drawable slots (P > 0)."""
    drawable = probabilities[probabilities > 0]
    return (size * probabilities[drawn]) ** -beta / ((size * drawable) ** -beta).max()


@pytest.mark.parametrize("bits", [1, 3, 4])
@pytest.mark.parametrize("capacity", [1, 17, 1000])
def test_tree_is_the_float32_binary_tree_of_its_leaves(capacity, bits):
    rng = np.random.default_rng(capacity * 10 + bits)
    tree = sum_tree.init(capacity, bits)
    n = sum_tree.num_leaves(tree)
    set_leaves = jax.jit(sum_tree.set_leaves, static_argnames="distinct")
    leaves = np.zeros(n, np.float32)
    for _ in range(3):
        # Repeated and out-of-range slots included; a repeated slot takes its largest value.
        slots = rng.integers(0, n + 2, 40).astype(np.int32)
        values = random_priorities(rng, 40, zero_fraction=0.3, low=1e-6, high=1e3)
        tree = set_leaves(tree, jnp.asarray(slots), jnp.asarray(values), distinct=False)
        for slot in set(slots.tolist()) - set(range(n, n + 2)):
            leaves[slot] = values[slots == slot].max()
        np.testing.assert_array_equal(np.asarray(tree.leaves), leaves)
        assert_tree_is_exact(tree)


@pytest.mark.parametrize("bits", [1, 4])
def test_descent_never_lands_on_a_zero_leaf_even_at_the_boundaries(bits):
    # Zero leaves between and after positive ones (the tail like empty slots), and targets
    # on every float32 prefix-sum boundary, at the total and past it: rounding must never
    # send a descent into a zero-mass subtree.
    rng = np.random.default_rng(bits)
    leaves = np.zeros(256, np.float32)  # 200 slots padded to 256
    leaves[:150] = random_priorities(rng, 150, zero_fraction=0.4, low=1e-6, high=1e3)
    tree = sum_tree.rebuild(jnp.asarray(leaves), bits)
    total = np.float32(sum_tree.total(tree))
    boundaries = np.cumsum(leaves, dtype=np.float32)
    targets = np.concatenate(
        [
            boundaries,
            np.nextafter(boundaries, np.float32(0)),
            [0.0, total, np.nextafter(total, np.float32(np.inf)), 2 * total],
        ]
    )
    found, mass = jax.jit(sum_tree.descend)(tree, jnp.asarray(targets, jnp.float32))
    assert (leaves[np.asarray(found)] > 0).all()
    np.testing.assert_array_equal(np.asarray(mass), leaves[np.asarray(found)])


@pytest.mark.parametrize("method", ["tree", "cumsum"])
def test_sampling_frequencies_match_p_alpha(method):
    rng = np.random.default_rng(0)
    capacity, filled, alpha = 300, 250, 0.6
    priorities = random_priorities(rng, filled)
    state = filled_buffer(capacity, priorities, alpha)
    draws = jax.jit(jax.vmap(lambda key: prioritized.sample(state, key, 1024, 0.4, method=method)))
    sample = draws(jax.random.split(jax.random.key(1), 100))  # 102,400 draws
    indices = np.asarray(sample.indices).ravel()
    assert indices.max() < filled and (priorities[indices] > 0).all()
    np.testing.assert_array_equal(np.asarray(sample.items["id"]), np.asarray(sample.indices))
    counts = np.bincount(indices, minlength=filled)
    drawable = priorities > 0
    expected = expected_probabilities(priorities, alpha) * indices.size
    assert stats.chisquare(counts[drawable], expected[drawable]).pvalue > 1e-3
    # The test can fail: the same draws are far from the alpha = 1 distribution.
    wrong = expected_probabilities(priorities, 1.0) * indices.size
    assert stats.chisquare(counts[drawable], wrong[drawable]).pvalue < 1e-9


def test_probabilities_and_weights_match_numpy():
    rng = np.random.default_rng(1)
    capacity, filled, alpha, beta = 64, 50, 0.7, 0.4
    priorities = random_priorities(rng, filled, zero_fraction=0.2)
    state = filled_buffer(capacity, priorities, alpha)
    sample = draw(state, jax.random.key(3), 256, beta)
    drawn = np.asarray(sample.indices)
    probabilities = expected_probabilities(priorities, alpha)
    np.testing.assert_allclose(np.asarray(sample.probabilities), probabilities[drawn], rtol=1e-5)
    np.testing.assert_allclose(
        np.asarray(sample.weights), reference_weights(probabilities, drawn, beta, filled), rtol=1e-5
    )
    assert float(sample.weights.max()) <= 1.0
    # One stratified draw per 1/256 of the mass: the indices come out sorted.
    assert (np.diff(drawn) >= 0).all()


def test_update_with_duplicates_takes_the_largest_whatever_the_order():
    rng = np.random.default_rng(2)
    capacity, filled, alpha = 40, 30, 0.5
    state = filled_buffer(capacity, np.ones(filled, np.float32), alpha)
    # Repeats, an empty slot (35), and indices outside the buffer (-1, 40): those are ignored.
    indices = np.array([3, 7, 3, 3, 12, 7, 35, -1, 40, 29], np.int32)
    values = np.array([2.0, 5.0, 9.0, 4.0, 0.5, 1.0, 8.0, 7.0, 6.0, 3.0], np.float32)
    updated = update(state, jnp.asarray(indices), jnp.asarray(values))
    expected = np.ones(capacity)
    expected[filled:] = 0.0
    expected[[3, 7, 12, 29]] = [9.0, 5.0, 0.5, 3.0]
    np.testing.assert_allclose(
        np.asarray(updated.tree.leaves)[:capacity], expected**alpha, rtol=1e-6
    )
    assert float(updated.max_priority) == 9.0  # the ignored 8.0, 7.0, 6.0 do not count
    assert_tree_is_exact(updated.tree)
    for _ in range(3):
        order = rng.permutation(len(indices))
        shuffled = update(state, jnp.asarray(indices[order]), jnp.asarray(values[order]))
        for a, b in zip(jax.tree.leaves(shuffled), jax.tree.leaves(updated)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_invalid_priorities_become_zero_and_are_never_drawn():
    state = filled_buffer(8, np.ones(8, np.float32), alpha=1.0)
    bad = jnp.array([np.nan, np.inf, -np.inf, -1.0], jnp.float32)
    state = update(state, jnp.arange(4, dtype=jnp.int32), bad)
    np.testing.assert_array_equal(np.asarray(state.tree.leaves)[:8], [0, 0, 0, 0, 1, 1, 1, 1])
    assert float(state.max_priority) == 1.0
    sample = draw(state, jax.random.key(0), 512, 1.0)
    assert np.asarray(sample.indices).min() >= 4
    np.testing.assert_allclose(np.asarray(sample.probabilities), 0.25)


def test_new_items_get_the_largest_priority_seen():
    state = prioritized.init(4, example_item(), alpha=0.5)
    state = add(state, numbered_items(0, 2))  # initial priority 1
    state = update(state, jnp.array([0], jnp.int32), jnp.array([16.0]))
    state = add(state, numbered_items(2, 2))  # gets 16
    np.testing.assert_allclose(np.asarray(state.tree.leaves), [4.0, 1.0, 4.0, 4.0])
    state = add(state, numbered_items(4, 1), jnp.array([0.0]))  # wraps onto slot 0
    np.testing.assert_allclose(np.asarray(state.tree.leaves), [0.0, 1.0, 4.0, 4.0])
    np.testing.assert_array_equal(np.asarray(state.ring.items["id"]), [4, 1, 2, 3])
    assert float(state.max_priority) == 16.0
    assert_tree_is_exact(state.tree)


def test_empty_or_all_zero_buffer_cannot_sample():
    state = prioritized.init(8, example_item())
    assert not bool(prioritized.can_sample(state))
    sample = draw(state, jax.random.key(0), 4, 0.5)
    np.testing.assert_array_equal(np.asarray(sample.probabilities), 0.0)
    np.testing.assert_array_equal(np.asarray(sample.weights), 0.0)
    zeros = filled_buffer(8, np.zeros(3, np.float32))
    assert not bool(prioritized.can_sample(zeros))
    assert bool(prioritized.can_sample(filled_buffer(8, np.array([0, 1e-3], np.float32))))


def test_no_float32_drift_after_ten_million_updates():
    # 10,000 scanned steps of 1,024 random priorities in [1e-6, 1e3] (10% zeros) over a
    # 20,000-slot buffer with 2,000 slots never filled; every step also draws 1,024 items.
    # (Big enough that the lower stored levels are updated by scatter, not rebuilt.)
    capacity, filled, steps, batch = 20_000, 18_000, 10_000, 1024
    state = filled_buffer(capacity, np.ones(filled, np.float32), alpha=1.0)

    def step(carry, key):
        state, bad = carry
        index_key, value_key, zero_key, sample_key = jax.random.split(key, 4)
        indices = jax.random.randint(index_key, (batch,), 0, capacity)  # empty slots too
        values = 10.0 ** jax.random.uniform(value_key, (batch,), minval=-6.0, maxval=3.0)
        values = jnp.where(jax.random.uniform(zero_key, (batch,)) < 0.1, 0.0, values)
        state = prioritized.update_priorities(state, indices, values)
        drawn = prioritized.sample(state, sample_key, batch, 0.4)
        mass = state.tree.leaves[drawn.indices]
        bad = bad + jnp.sum((mass <= 0) | (drawn.indices >= filled) | (drawn.probabilities <= 0))
        return (state, bad), None

    keys = jax.random.split(jax.random.key(7, impl="philox4x32"), steps)
    state, bad = jax.jit(lambda state: jax.lax.scan(step, (state, 0), keys)[0])(state)
    assert int(bad) == 0
    assert_tree_is_exact(state.tree)
    leaves = np.asarray(state.tree.leaves, np.float64)
    assert (leaves[filled:] == 0).all()
    np.testing.assert_allclose(float(prioritized.total_priority(state)), leaves.sum(), rtol=1e-5)


def test_jit_equals_eager_and_vmap_equals_loop():
    rng = np.random.default_rng(4)
    buffers = [filled_buffer(32, random_priorities(rng, 20 + 3 * b)) for b in range(4)]
    keys = jax.random.split(jax.random.key(5), 4)
    new_priorities = jnp.asarray(random_priorities(rng, 16), jnp.float32)

    def round_trip(state, key):
        sample = prioritized.sample(state, key, 16, 0.5)
        state = prioritized.update_priorities(state, sample.indices, new_priorities)
        state = prioritized.add(state, numbered_items(100, 3))
        return state, sample

    stacked = jax.tree.map(lambda *x: jnp.stack(x), *buffers)
    vmapped = jax.jit(jax.vmap(round_trip))(stacked, keys)
    jitted = jax.jit(round_trip)
    for b in range(4):
        assert_same(jax.tree.map(lambda x: x[b], vmapped), jitted(buffers[b], keys[b]))
    # Eager dispatch compiles op by op, so only the sample (the float-heavy part) runs eagerly.
    assert_same(prioritized.sample(buffers[0], keys[0], 16, 0.5), jitted(buffers[0], keys[0])[1])


def test_donated_round_updates_in_place():
    state = filled_buffer(100_000, np.ones(100_000, np.float32))

    def round_trip(state, key):
        sample = prioritized.sample(state, key, 1024, 0.4)
        return prioritized.update_priorities(state, sample.indices, sample.weights + 1.0)

    memory = jax.jit(round_trip, donate_argnums=0).lower(state, jax.random.key(0)).compile()
    memory = memory.memory_analysis()
    state_bytes = sum(x.nbytes for x in jax.tree.leaves(state))
    assert memory.alias_size_in_bytes >= 0.99 * state_bytes  # small top levels are rebuilt
    # Scratch for the batch only: a copy of the leaves (the smallest big array) would not fit.
    assert memory.temp_size_in_bytes < state.tree.leaves.nbytes // 2


def test_validation_errors():
    with pytest.raises(ValueError, match="alpha"):
        prioritized.init(4, example_item(), alpha=-1.0)
    state = filled_buffer(4, np.ones(2, np.float32))
    with pytest.raises(ValueError, match="update_priorities"):
        prioritized.update_priorities(state, jnp.zeros(3, jnp.int32), jnp.ones(2))
    with pytest.raises(ValueError, match="priorities"):
        prioritized.add(state, numbered_items(0, 2), jnp.ones(3))
    with pytest.raises(ValueError, match="method"):
        prioritized.sample(state, jax.random.key(0), 2, 0.5, method="linear")


# --- sharding: D shards, each holding capacity/D and drawing batch/D -------------------------

SHARD_PRIORITIES = [
    np.linspace(0.5, 3.0, 24, dtype=np.float32),
    np.concatenate([np.zeros(4), np.geomspace(0.01, 30.0, 16)]).astype(np.float32),
]


def sharded_buffers(priorities=SHARD_PRIORITIES, alpha=0.6):
    """Shard states stacked on a leading axis [D, ...] (capacity 32 each)."""
    shards = [filled_buffer(32, p, alpha) for p in priorities]
    return jax.tree.map(lambda *x: jnp.stack(x), *shards)


def sharded_step(state, key, new_priorities):
    """What every shard runs: draw 64, update those, add 2; the max priority is shared."""
    sample = prioritized.sample(state, key, 64, 0.5, axis_name="data")
    state = prioritized.update_priorities(state, sample.indices, new_priorities, axis_name="data")
    state = prioritized.add(state, numbered_items(1000, 2), axis_name="data")
    return state, sample


def run_sharded_with_vmap(state, key, new_priorities):
    return jax.vmap(sharded_step, in_axes=(0, None, 0), axis_name="data")(
        state, key, new_priorities
    )


def shard_new_priorities():
    return jnp.stack([jnp.full((64,), 2.0), jnp.full((64,), 50.0)])


def test_sharded_sample_reports_the_true_probability_of_each_draw():
    alpha, beta, shards = 0.6, 0.5, 2
    state = sharded_buffers(alpha=alpha)
    key = jax.random.key(11)
    new_state, sample = jax.jit(run_sharded_with_vmap)(state, key, shard_new_priorities())
    powered = [np.where(p > 0, np.float64(p) ** alpha, 0.0) for p in SHARD_PRIORITIES]
    # P(i on shard d) = p_i^α / (D · Σ_{k on d} p_k^α); the weights' max spans both shards.
    true_p = [w / (shards * w.sum()) for w in powered]
    all_p = np.concatenate(true_p)
    size = sum(len(p) for p in SHARD_PRIORITIES)
    w_max = ((size * all_p[all_p > 0]) ** -beta).max()
    for d in range(shards):
        drawn = np.asarray(sample.indices[d])
        assert (SHARD_PRIORITIES[d][drawn] > 0).all()
        np.testing.assert_allclose(np.asarray(sample.probabilities[d]), true_p[d][drawn], rtol=1e-5)
        np.testing.assert_allclose(
            np.asarray(sample.weights[d]), (size * true_p[d][drawn]) ** -beta / w_max, rtol=1e-5
        )
        # Shard d draws exactly what its own unsharded buffer draws with the folded-in key.
        local = jax.tree.map(lambda x: x[d], state)
        alone = draw(local, jax.random.fold_in(key, d), 64, beta)
        np.testing.assert_array_equal(np.asarray(alone.indices), drawn)
    # The running max priority is shared: both shards' new items got 50.
    assert np.asarray(new_state.max_priority).tolist() == [50.0, 50.0]
    for d, p in enumerate(SHARD_PRIORITIES):
        new_slots = np.asarray(new_state.tree.leaves[d])[len(p) : len(p) + 2]
        np.testing.assert_allclose(new_slots, 50.0**alpha, rtol=1e-6)


def test_shards_of_equal_mass_report_the_unsharded_probabilities_and_weights():
    # Shard 1 holds shard 0's priorities reversed: equal masses, so P(i) = p_i^α / Σ_all p^α.
    alpha, beta = 0.6, 0.5
    halves = [SHARD_PRIORITIES[1], SHARD_PRIORITIES[1][::-1].copy()]
    state = sharded_buffers(halves, alpha)
    sample = jax.jit(
        jax.vmap(
            lambda s, k: prioritized.sample(s, k, 64, beta, axis_name="data"),
            in_axes=(0, None),
            axis_name="data",
        )
    )(state, jax.random.key(12))
    whole = filled_buffer(64, np.concatenate(halves), alpha)  # the same items in one buffer
    everything = draw(whole, jax.random.key(13), 4096, beta)
    by_item = dict(
        zip(
            np.asarray(everything.indices).tolist(),
            zip(np.asarray(everything.probabilities), np.asarray(everything.weights)),
        )
    )
    checked = 0
    for d in range(2):
        for local, p, w in zip(
            *(np.asarray(x[d]) for x in (sample.indices, sample.probabilities, sample.weights))
        ):
            item = d * len(halves[0]) + int(local)
            if item in by_item:
                np.testing.assert_allclose([p, w], by_item[item], rtol=1e-5)
                checked += 1
    assert checked > 100


SUBPROCESS = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import tests.test_replay_prioritized as t

    assert len(jax.devices()) == 2, jax.devices()
    mesh = Mesh(np.array(jax.devices()), ("data",))
    state = jax.device_put(t.sharded_buffers(), NamedSharding(mesh, P("data")))
    priorities = jax.device_put(t.shard_new_priorities(), NamedSharding(mesh, P("data")))

    def per_device(state, key, new_priorities):
        local = jax.tree.map(lambda x: x[0], (state, new_priorities))
        out = t.sharded_step(local[0], key, local[1])
        return jax.tree.map(lambda x: x[None], out)

    run = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P("data"), P(), P("data")),
                                out_specs=P("data")))
    new_state, sample = run(state, jax.random.key(11), priorities)
    assert len(sample.indices.sharding.device_set) == 2
    out = {{"indices": sample.indices, "probabilities": sample.probabilities,
           "weights": sample.weights, "leaves": new_state.tree.leaves,
           "max_priority": new_state.max_priority, "ids": sample.items["id"]}}
    print(json.dumps({{k: np.asarray(v).tolist() for k, v in out.items()}}))
""")


def test_shard_map_over_two_cpu_devices_equals_the_named_axis_vmap():
    env = {
        **os.environ,
        "XLA_FLAGS": (
            os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
        ).strip(),
        "JAX_PLATFORMS": "cpu",
    }
    script = SUBPROCESS.format()
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    new_state, sample = jax.jit(run_sharded_with_vmap)(
        sharded_buffers(), jax.random.key(11), shard_new_priorities()
    )
    np.testing.assert_array_equal(got["indices"], np.asarray(sample.indices))
    np.testing.assert_array_equal(got["ids"], np.asarray(sample.items["id"]))
    np.testing.assert_allclose(got["probabilities"], np.asarray(sample.probabilities), rtol=1e-6)
    np.testing.assert_allclose(got["weights"], np.asarray(sample.weights), rtol=1e-6)
    np.testing.assert_allclose(got["leaves"], np.asarray(new_state.tree.leaves), rtol=1e-6)
    assert got["max_priority"] == np.asarray(new_state.max_priority).tolist()
