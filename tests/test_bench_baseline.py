"""scripts/bench_baseline.py: the plain baselines run, are shaped right, and the parts
that can be silently wrong (GAE, the ring buffer, the squashed policy) are right.

The baselines run tiny (networks of 8 units, a few dozen steps) and compile at XLA's
backend optimization level 0, so the three whole training programs stay a small test.
"""

import importlib.util
import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_baseline.py"
spec = importlib.util.spec_from_file_location("bench_baseline", SCRIPT)
bb = importlib.util.module_from_spec(spec)
sys.modules["bench_baseline"] = bb  # flax modules are dataclasses: their module must be known
spec.loader.exec_module(bb)

FAST = {"xla_backend_optimization_level": 0}


def run(train):
    compiled = jax.jit(train).lower(jax.random.key(0)).compile(compiler_options=FAST)
    return jax.device_get(compiled(jax.random.key(0)))


def all_finite(tree):
    return all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(tree))


def test_gae_matches_a_python_loop():
    rng = np.random.default_rng(0)
    T, B, gamma, lam = 7, 3, 0.9, 0.8
    values, rewards = rng.normal(size=(T, B)), rng.normal(size=(T, B))
    dones = rng.random((T, B)) < 0.3
    last = rng.normal(size=B)
    expected = np.zeros((T, B))
    for b in range(B):
        adv = 0.0
        for t in reversed(range(T)):
            next_value = last[b] if t == T - 1 else values[t + 1, b]
            nonterminal = 0.0 if dones[t, b] else 1.0
            delta = rewards[t, b] + gamma * nonterminal * next_value - values[t, b]
            adv = delta + gamma * lam * nonterminal * adv
            expected[t, b] = adv
    got = bb.gae(
        jnp.asarray(values, jnp.float32),
        jnp.asarray(rewards, jnp.float32),
        jnp.asarray(dones),
        jnp.asarray(last, jnp.float32),
        gamma,
        lam,
    )
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_ring_buffer_keeps_the_last_capacity_items_and_samples_only_them():
    buf = bb.ring_init(5, {"x": jnp.zeros(2), "i": jnp.int32(0)})
    for start in (0, 3, 6):  # 9 items into 5 slots: 4..8 remain
        i = jnp.arange(start, start + 3, dtype=jnp.int32)
        buf = bb.ring_add(buf, {"x": jnp.stack([i, -i], 1).astype(jnp.float32), "i": i})
    assert int(buf["size"]) == 5 and int(buf["pos"]) == 4
    assert sorted(np.asarray(buf["items"]["i"]).tolist()) == [4, 5, 6, 7, 8]
    drawn = bb.ring_sample(buf, jax.random.key(1), 200)
    i = np.asarray(drawn["i"])
    assert set(i.tolist()) == {4, 5, 6, 7, 8}  # every stored item, nothing else
    np.testing.assert_array_equal(np.asarray(drawn["x"]), np.stack([i, -i], 1))
    # a partly filled buffer draws only from its filled slots
    part = bb.ring_add(bb.ring_init(5, {"i": jnp.int32(0)}), {"i": jnp.array([7, 9])})
    assert set(np.asarray(bb.ring_sample(part, jax.random.key(2), 100)["i"])) == {7, 9}


def test_squashed_sample_log_prob_is_the_density_of_the_action():
    mean, log_std = jnp.array([[0.3], [-8.0]]), jnp.array([[-0.5], [0.0]])
    a, logp = bb.squashed_sample(mean, log_std, jax.random.key(3))
    a, logp = np.asarray(a, np.float64), np.asarray(logp, np.float64)
    # change of variables by hand for the first row: u = atanh(a), p(a) = N(u) / (1 - a^2)
    u, std = np.arctanh(a[0, 0]), np.exp(-0.5)
    log_normal = -0.5 * ((u - 0.3) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)
    assert logp[0] == pytest.approx(log_normal - np.log(1 - a[0, 0] ** 2), abs=1e-4)
    assert np.all(np.abs(a) <= 1) and np.all(np.isfinite(logp))  # far in the tail too


def test_final_return_takes_the_chunks_ending_after_90_percent():
    ends, ret_sums, episodes = [25, 50, 75, 100], [10.0, 20.0, 300.0, 600.0], [1, 1, 3, 4]
    assert bb.final_return([10 * k for k in range(1, 11)], range(10), [1] * 10, 100) == 9.0
    assert bb.final_return(ends, ret_sums, episodes, 100) == 150.0  # only the last chunk
    assert math.isnan(bb.final_return(ends, ret_sums, [0, 0, 0, 0], 100))


def test_ppo_baseline_runs():
    train, per_update = bb.make_ppo(
        256, num_envs=2, num_steps=8, hidden=(8,), epochs=2, minibatches=2
    )
    assert per_update == 16
    out = run(train)
    assert out["ret_sum"].shape == out["episodes"].shape == (16,)
    assert out["episodes"].sum() > 0 and all_finite(out)
    assert out["params"]["actor"]["params"]["Dense_0"]["kernel"].shape == (4, 8)


def test_dqn_baseline_runs_and_learns_only_after_learning_starts():
    train, per_tick = bb.make_dqn(
        200,
        num_envs=2,
        steps_per_tick=5,
        updates_per_tick=3,
        batch_size=8,
        hidden=(8,),
        learning_starts=50,
        capacity=64,
    )
    assert per_tick == 10
    out = run(train)
    assert out["ret_sum"].shape == (20,) and all_finite(out)
    assert int(out["updates"]) == (20 - 4) * 3  # ticks from the 5th on (50 steps stored)
    buf = out["buffer"]
    assert int(buf["size"]) == 64 and set(np.unique(buf["items"]["action"])) <= {0, 1}


def test_sac_baseline_runs_and_acts_within_the_bounds():
    train, per_step = bb.make_sac(60, hidden=(8,), batch_size=8, learning_starts=20, capacity=64)
    assert per_step == 1
    out = run(train)
    assert out["ret_sum"].shape == (60,) and all_finite(out)
    actions = out["buffer"]["items"]["action"]
    assert actions.shape == (64, 1) and np.all(np.abs(actions) <= 2.0)  # Pendulum: [-2, 2]
    assert np.ptp(actions) > 0.1  # a stochastic policy, not a constant
    state = out["state"]
    assert float(state["log_alpha"]) != 0.0  # 41 temperature updates from log 1 = 0
    moved = jax.tree.map(lambda a, b: np.abs(a - b).max(), state["critic"], state["target"])
    assert max(jax.tree.leaves(moved)) > 0  # the target trails the critic (Polyak)
