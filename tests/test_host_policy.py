"""An actor's policy (`host/policy.py`): the agent's `act` under the JAX rollout's key
rule, its parameters taken as one flat vector and its output fetched as one buffer of
bytes, read back bit for bit as the arrays the program made. The program is the act
with the bytes' packing fused in, so XLA may round its floats differently from the act
compiled alone (a carry's last bit): actions match exactly, floats to rounding."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async import load_config
from jaxrl_async.host import make_actor_envs, make_host_agent
from jaxrl_async.host.policy import ActorPolicy
from jaxrl_async.types import ActorClock, ActOutput, Memory
from tests.helpers import host_envs  # noqa: F401  (registers the corridor envs)
from tests.helpers.host_runs import CORRIDOR, SMALL, dqn_config

FIRST_ENV, NUM_ENVS = 2, 8


def direct(agent, key, params, memory, obs, step) -> ActOutput:
    """The agent's act as the rollout rule calls it: step key = key folded with the
    global step, each env's that one folded with the env's global index."""
    index = FIRST_ENV + jnp.arange(len(obs), dtype=jnp.int32)
    keys = jax.vmap(jax.random.fold_in, (None, 0))(jax.random.fold_in(key, step), index)
    carry, start = (None, None) if memory is None else memory
    out = agent.act(params, carry, obs, start, keys, ActorClock(step * NUM_ENVS, index, NUM_ENVS))
    return jax.device_get(out)


def assert_same(a, b, exact: bool = True) -> None:
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        if exact or not np.issubdtype(x.dtype, np.floating):
            np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    "config",
    [
        load_config("ppo_cartpole", [f"env.name={CORRIDOR}", *SMALL]),
        load_config("ppo_cartpole", [f"env.name={CORRIDOR}", *SMALL, "agent.memory=gru"]),
        load_config("ppo_halfcheetah", ["env.num_envs=2", "pipeline.actor_processes=false"]),
        dqn_config(),
    ],
    ids=["ppo", "gru", "gaussian", "dqn"],
)
def test_the_policy_acts_as_the_agent_under_the_rollout_key_rule(config):
    envs = make_actor_envs(config)
    try:
        spec, obs = envs[0].spec, envs[0].reset(0)
        agent = make_host_agent(config, spec)
    finally:
        for env in envs:
            env.close()
    params = agent.init(jax.random.key(3)).params
    memory = None
    if agent.init_carry is not None:
        carry = jax.tree.map(lambda x: x + 0.5, agent.init_carry(len(obs)))  # not all zeros
        memory = Memory(carry, np.array([True] + [False] * (len(obs) - 1)))
    key = jax.random.key(7)
    policy = ActorPolicy(agent, key, FIRST_ENV, len(obs), NUM_ENVS)
    prepared = policy.prepare(params)
    assert prepared.unravel is not None and prepared.flat.ndim == 1  # one flat vector
    for step in (0, 5):
        got = policy(prepared, memory, obs, np.int32(step))
        assert_same(got, direct(agent, key, params, memory, obs, np.int32(step)), exact=False)


class Mixed:
    """An agent whose parameters mix dtypes and whose output has leaves of every width."""

    init_carry = None

    @staticmethod
    def act(params, carry, obs, episode_start, keys, clock) -> ActOutput:
        x = obs.sum(-1) * params["w"] + params["n"]
        extras = {
            "flag": x > 0,
            "small": x.astype(jnp.int8),
            "wide": jnp.stack([x, -x], -1),
            "bits": jax.vmap(jax.random.bits)(keys),
        }
        return ActOutput(None, x.astype(jnp.int32), extras)


def test_mixed_parameters_stay_a_tree_and_every_output_dtype_comes_back_exactly():
    params = {"w": jnp.float32(1.5), "n": jnp.int32(-2)}
    policy = ActorPolicy(Mixed, jax.random.key(0), FIRST_ENV, 3, NUM_ENVS)
    prepared = policy.prepare(params)
    assert prepared.unravel is None and prepared.flat is params
    obs = np.array([[0.0, 1.0], [2.0, 2.0], [-3.0, 0.5]], np.float32)
    got = policy.fetch(policy.dispatch(prepared, None, obs, np.int32(4)))
    assert_same(got, direct(Mixed, jax.random.key(0), params, None, obs, np.int32(4)))
    assert got.extras["flag"].tolist() == [False, True, False]
