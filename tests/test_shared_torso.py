"""`agent.shared_torso`: the memoryless actor-critic with one torso feeding both heads
(`networks.SharedActorCritic`): one torso's parameters, both losses reach it, and it
scores actions as it acts."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async
from jaxrl_async import envs
from jaxrl_async.agents.actor_critic import make_actor_critic
from jaxrl_async.envs.spec import obs_zeros, spec_of
from jaxrl_async.pipeline.build import build_pipeline
from jaxrl_async.types import Transition

KEY = jax.random.key(0)


def _nets(name: str, overrides=()):
    """(config, its spec, the separate network, the shared one) of config `name`."""
    config = jaxrl_async.load_config(name, list(overrides))
    env, params = envs.resolve(config.env)
    spec = spec_of(env, params)
    torso = config.agent.torso_spec()
    return (
        config,
        spec,
        make_actor_critic(spec, torso, "ppo"),
        make_actor_critic(spec, torso, "ppo", shared=True),
    )


def _count(tree) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(tree))


def _obs(spec, n: int = 6):
    zeros = obs_zeros(spec)
    return jax.random.normal(jax.random.key(1), (n, *zeros.shape[1:]), zeros.dtype)


@pytest.mark.parametrize("name", ["ppo_cartpole", "ppo_pendulum"])
def test_one_torso_carries_both_heads(name):
    """The shared network has the separate pair's parameters less one torso (for an MLP
    torso: every hidden layer of one of them)."""
    config, _, separate, shared = _nets(name)
    sep, sh = separate.init(KEY), shared.init(KEY)
    n_in = sep["critic"]["params"]["MLP_0"]["Dense_0"]["kernel"].shape[0]
    widths = (n_in, *config.agent.hidden_sizes)
    torso = sum(a * b + b for a, b in itertools.pairwise(widths))
    assert _count(sh) == _count(sep) - torso
    assert set(sh["params"]) >= {"body", "policy_out", "value_out"}


@pytest.mark.parametrize("name", ["ppo_cartpole", "ppo_pendulum"])
def test_it_scores_the_actions_it_takes_and_values_as_values_does(name):
    _, spec, _, net = _nets(name)
    params, obs = net.init(KEY), _obs(spec)
    keys = jax.random.split(jax.random.key(2), obs.shape[0])
    _, action, extras = net.act(params, None, obs, None, keys, None)
    scored_action = extras.get("raw_action", action)
    scored = net.evaluate(params, {"obs": obs, "action": scored_action, "next_obs": obs}, True)
    np.testing.assert_allclose(scored.log_prob, extras["log_prob"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(scored.value, scored.next_value, rtol=1e-6)

    def values(truncated):  # `values` of a trajectory [2, 3] observing obs, then obs reversed
        traj = Transition(
            obs.reshape(2, 3, -1), None, jnp.zeros((2, 3)), None, truncated,
            obs[::-1].reshape(2, 3, -1), {}, None,
        )  # fmt: skip
        return (x.reshape(-1) for x in net.values(params, traj))

    # every step truncated: V of every x'
    v, next_v = values(jnp.ones((2, 3), bool))
    np.testing.assert_allclose(v, scored.value, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(next_v, scored.value[::-1], rtol=1e-5, atol=1e-6)
    # none: V(x_t+1) for x'_t, but at the last step
    v, next_v = values(jnp.zeros((2, 3), bool))
    np.testing.assert_allclose(next_v[:3], v[3:], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(next_v[3:], scored.value[::-1][3:], rtol=1e-5, atol=1e-6)


def test_the_value_loss_reaches_the_policys_torso_only_when_shared():
    _, spec, separate, shared = _nets("ppo_cartpole")
    obs = _obs(spec)
    batch = {"obs": obs, "action": jnp.zeros(obs.shape[0], jnp.int32)}

    def grads(net, part):
        params = net.init(KEY)
        return jax.grad(lambda p: jnp.sum(getattr(net.evaluate(p, batch), part) ** 2))(params)

    def norm(tree):
        return float(sum(jnp.sum(x**2) for x in jax.tree.leaves(tree)))

    assert norm(grads(shared, "value")["params"]["body"]) > 0
    assert norm(grads(shared, "log_prob")["params"]["body"]) > 0
    assert norm(grads(shared, "value")["params"]["policy_out"]) == 0
    # separate torsos: the value loss leaves the policy network alone
    assert norm(grads(separate, "value")["actor"]) == 0


def test_the_option_is_read_by_ppo_and_impala():
    for name in ("ppo_cartpole", "impala_cartpole"):
        assert not jaxrl_async.load_config(name).agent.shared_torso
        config = jaxrl_async.load_config(name, ["agent.shared_torso=true"])
        _, agent = build_pipeline(config)
        assert "body" in agent.init(KEY).params["params"]
    with pytest.raises(jaxrl_async.ConfigError, match="shared_torso"):
        jaxrl_async.load_config("dqn_cartpole", ["agent.shared_torso=true"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, kl", [("ppo_cartpole", "approx_kl"), ("impala_cartpole", "behaviour_kl")]
)
def test_first_learner_pass_reproduces_the_actors_log_probs_at_lag0(name, kl):
    """One epoch of one minibatch at lag 0: the learner scores the actions with the
    parameters that acted, through the one torso, so the KL to the actor's is 0 up to
    rounding, while the shared torso trains (the loss moves)."""
    config = jaxrl_async.load_config(
        name,
        [
            "agent.shared_torso=true",
            "agent.num_epochs=1",
            "agent.num_minibatches=1",
            "env.num_envs=8",
            "pipeline.rollout_len=16",
            "pipeline.lag=0",
        ],
    )
    pipeline, _ = build_pipeline(config)
    state, metrics = jax.jit(pipeline.chunk(4))(jax.jit(pipeline.init)(KEY))
    assert np.all(np.asarray(metrics[kl]) < 1e-10), metrics[kl]
    assert "body" in state.learner.params["params"]
