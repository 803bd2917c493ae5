"""Observations beyond a flat vector: dict observations (encoded per key), image leaves
through the conv torso, and action masks that no discrete policy ever violates."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async
from jaxrl_async.agents import make_agent
from jaxrl_async.config.agents import DQNConfig, IMPALAConfig, PPOConfig
from jaxrl_async.envs import check_env
from jaxrl_async.envs.spec import obs_zeros
from jaxrl_async.errors import ConfigError
from jaxrl_async.types import ActorClock, BuildContext
from tests.helpers.learning import assert_learns
from tests.helpers.probe_envs import MaskedImageMatch

ENV = MaskedImageMatch()
OPTIMUM = ENV.default_params.episode_length


def test_dict_observation_spec_and_check():
    spec = check_env(ENV, ENV.default_params)
    assert spec.obs_shape == {"image": (4, 4, 2), "action_mask": (3,)}
    assert spec.obs_dtype["action_mask"] == np.bool_
    zeros = obs_zeros(spec, (5,))
    assert zeros["image"].shape == (5, 4, 4, 2) and zeros["action_mask"].dtype == jnp.bool_


@pytest.mark.parametrize(
    "config",
    [
        PPOConfig(hidden_sizes=(8,)),
        PPOConfig(hidden_sizes=(8,), torso="cnn", cnn_channels=(4,)),
        IMPALAConfig(hidden_sizes=(8,)),
        DQNConfig(hidden_sizes=(8,), torso="cnn", cnn_channels=(4,), epsilon_start=1.0),
    ],
    ids=["ppo-mlp", "ppo-cnn", "impala", "dqn-explore"],
)
def test_no_policy_takes_a_masked_action(config):
    """Sampled (DQN: ε = 1, all random) and greedy actions over 512 envs with weights that
    prefer the illegal action strongly: never action 2."""
    spec = check_env(ENV, ENV.default_params)
    agent = make_agent(config, BuildContext(spec, 512, 8, 1))
    params = agent.init(jax.random.key(0)).params
    # Every output bias towards action 2: unmasked, it would be chosen everywhere.
    params = jax.tree_util.tree_map_with_path(
        lambda path, x: x.at[..., 2].add(50.0) if x.ndim == 1 and x.shape[-1] == 3 else x, params
    )
    keys = jax.random.split(jax.random.key(1), 512)
    obs, _ = jax.vmap(ENV.reset, (0, None))(keys, ENV.default_params)
    clock = ActorClock(jnp.int32(0), jnp.arange(512), 512)
    sampled = agent.act(params, None, obs, None, keys, clock).action
    greedy = agent.greedy(params, None, obs, None).action
    assert not np.any(np.asarray(sampled) == 2) and not np.any(np.asarray(greedy) == 2)
    assert set(np.asarray(sampled).tolist()) == {0, 1}  # both legal actions still drawn
    # A row whose mask allows nothing (some suites at an episode's end) allows everything.
    none_legal = {**obs, "action_mask": jnp.zeros_like(obs["action_mask"])}
    assert np.all(np.asarray(agent.greedy(params, None, none_legal, None).action) == 2)


def test_cnn_torso_has_conv_layers_and_needs_an_image():
    spec = check_env(ENV, ENV.default_params)
    agent = make_agent(
        PPOConfig(
            hidden_sizes=(8,),
            torso="cnn",
            cnn_channels=(4, 4),
            cnn_kernels=(3, 2),
            cnn_strides=(1, 2),
        ),
        BuildContext(spec, 4, 8, 1),
    )
    params = agent.init(jax.random.key(0)).params["actor"]["params"]
    kernels = [params["Encoder_0"][f"Conv_{i}"]["kernel"].shape for i in range(2)]
    assert kernels == [(3, 3, 2, 4), (2, 2, 4, 4)]
    with pytest.raises(ConfigError, match="torso=cnn needs an image"):
        jaxrl_async.train(
            jaxrl_async.load_config(
                "ppo_cartpole", ["agent.torso=cnn", "train.total_steps=512", "train.progress=false"]
            )
        )
    with pytest.raises(ConfigError, match="cnn_channels"):
        jaxrl_async.load_config("ppo_cartpole", ["agent.cnn_channels=[4,4]"])


def test_normalize_obs_refuses_a_dict_observation():
    config = jaxrl_async.load_config(
        "ppo_cartpole", ["env.normalize_obs=true", "train.progress=false"]
    )
    with pytest.raises(ConfigError, match="normalize_obs=true needs an array"):
        jaxrl_async.train(config, env=ENV)


@pytest.mark.slow
def test_ppo_with_cnn_torso_learns_from_a_masked_dict_observation():
    """PPO (conv torso) on the image + mask env over 6 seeds: 5 and the median reach 95%
    of the optimum, and no episode ever scores above it (an illegal action earns 2).
    """
    config = jaxrl_async.load_config(
        "ppo_cartpole",
        [
            "env.num_envs=8",
            "pipeline.rollout_len=16",
            "agent.hidden_sizes=[16]",
            "agent.torso=cnn",
            "agent.cnn_channels=[4]",
            "agent.learning_rate=3e-3",
            "agent.ent_coef=0.0",
            "train.total_steps=10240",
            "train.log_every=512",
            "train.num_seeds=6",
            "train.progress=false",
        ],
    )
    result = jaxrl_async.train(config, env=ENV)
    assert_learns(result, 0.95 * OPTIMUM, min_passing=5)
    curves = np.stack([np.asarray(result.metrics[f"episode_return/seed{k}"]) for k in range(6)])
    assert np.nanmax(curves) <= OPTIMUM + 1e-6, "an episode scored above the legal optimum"


@pytest.mark.slow
def test_dqn_explores_and_learns_only_legal_actions():
    """DQN (ε from 1) on the image + mask env, 4 seeds: returns never exceed the legal
    optimum (uniform exploration over all 3 actions would average 1.33 per step, above
    the legal 1), and the median seed learns the context."""
    config = jaxrl_async.load_config(
        "dqn_cartpole",
        [
            "env.num_envs=8",
            "pipeline.rollout_len=4",
            "agent.hidden_sizes=[16]",
            "agent.epsilon_decay_steps=2000",
            "agent.target_update_every=10",
            "agent.learning_rate=1e-3",
            "replay.capacity=4096",
            "replay.batch_size=64",
            "replay.learning_starts=256",
            "train.total_steps=8192",
            "train.log_every=512",
            "train.num_seeds=4",
            "train.progress=false",
        ],
    )
    result = jaxrl_async.train(config, env=ENV)
    curves = np.stack([np.asarray(result.metrics[f"episode_return/seed{k}"]) for k in range(4)])
    assert np.nanmax(curves) <= OPTIMUM + 1e-6, "an episode scored above the legal optimum"
    assert_learns(result, 0.9 * OPTIMUM, min_passing=3)
