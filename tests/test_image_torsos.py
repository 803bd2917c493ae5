"""The published image torsos (`agent.torso=nature` and `impala`, nn/torsos.py): their
shapes and parameter counts against the papers' layer sizes, uint8 frames scaled inside the
network, the checks on the observation, and a replay that keeps frames uint8."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

import jaxrl_async
from jaxrl_async.config.agent import IMAGE_TORSO_FEATURES
from jaxrl_async.config.agents import DQNConfig, PPOConfig
from jaxrl_async.errors import ConfigError
from jaxrl_async.nn.torsos import (
    IMAGE_TORSOS,
    IMPALA_BLOCKS,
    IMPALA_CHANNELS,
    IMPALA_FEATURES,
    NATURE_CONV,
    NATURE_FEATURES,
    ImpalaTorso,
    NatureTorso,
    check_image_observation,
    min_image_size,
)
from jaxrl_async.pipeline.build import build_pipeline
from tests.helpers.configs import DQN_TINY
from tests.helpers.probe_envs import MatchParams, MatchState

FRAMES = (84, 84, 4)  # the Atari preprocessing of both papers: 84x84, 4 frames stacked


class FrameEnv:
    """Random uint8 frames [size, size, 4]; reward 1 for action 0; episodes of
    `episode_length` steps (terminated)."""

    def __init__(self, size: int):
        self.shape = (size, size, 4)

    @property
    def default_params(self) -> MatchParams:
        return MatchParams()

    def observation_space(self, params):
        return spaces.Box(0, 255, self.shape, jnp.uint8)

    def action_space(self, params):
        return spaces.Discrete(2)

    def reset(self, key, params):
        frame = jax.random.randint(key, self.shape, 0, 256).astype(jnp.uint8)
        return frame, MatchState(jnp.int32(0), jnp.int32(0))

    def step(self, key, state, action, params):
        frame, _ = self.reset(key, params)
        time = state.time + 1
        terminated = time >= params.episode_length
        state = MatchState(state.context, jnp.where(terminated, 0, time))
        reward = (action == 0).astype(jnp.float32)
        return frame, state, reward, terminated, jnp.bool_(False), {"final_observation": frame}


def frames(batch: int = 2, shape=FRAMES, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (batch, *shape), dtype=np.uint8)


def random_params(module, x):
    """Parameters of `module` drawn from a normal (the orthogonal init's QR is slow to
    compile on a CPU, and what is tested here holds for any parameters)."""
    rng = np.random.default_rng(1)
    shapes = jax.eval_shape(module.init, jax.random.key(0), x)
    return jax.tree.map(lambda s: (0.05 * rng.standard_normal(s.shape)).astype(np.float32), shapes)


def num_params(tree) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(tree))


def conv_params(kernel: int, inputs: int, outputs: int) -> int:
    return kernel * kernel * inputs * outputs + outputs


TORSOS = [(NatureTorso(), NATURE_FEATURES), (ImpalaTorso(), IMPALA_FEATURES)]


@pytest.mark.parametrize("module,features", TORSOS, ids=["nature", "impala"])
def test_output_shape_on_stacked_frames(module, features):
    x = jax.ShapeDtypeStruct((2, *FRAMES), jnp.uint8)
    out = jax.eval_shape(module.init_with_output, jax.random.key(0), x)[0]
    assert out.shape == (2, features) and out.dtype == jnp.float32


@pytest.mark.parametrize("module", [m for m, _ in TORSOS], ids=["nature", "impala"])
def test_uint8_frames_read_as_floats_over_255(module):
    x = frames()
    params = random_params(module, x)
    apply = jax.jit(module.apply)
    out = apply(params, x)
    as_floats = apply(params, x.astype(np.float32) / 255.0)
    np.testing.assert_allclose(out, as_floats, rtol=1e-5, atol=1e-5 * float(np.abs(out).max()))
    assert np.abs(np.asarray(out)).sum() > 0
    # Float frames pass unchanged: frames in [0, 255] as floats are not the same input.
    assert not np.allclose(out, apply(params, x.astype(np.float32)))


def test_nature_parameter_count_is_the_published_network():
    """Three VALID convs (84 -> 20 -> 9 -> 7), then dense 512 on the 7x7x64 flattened."""
    size, inputs, expected = FRAMES[0], FRAMES[2], 0
    for channels, kernel, stride in NATURE_CONV:
        expected += conv_params(kernel, inputs, channels)
        size, inputs = (size - kernel) // stride + 1, channels
    expected += size * size * inputs * NATURE_FEATURES + NATURE_FEATURES
    assert NATURE_CONV == ((32, 8, 4), (64, 4, 2), (64, 3, 1)) and NATURE_FEATURES == 512
    params = jax.eval_shape(NatureTorso().init, jax.random.key(0), frames(1))
    assert num_params(params) == expected


def test_impala_parameter_count_is_the_published_network():
    """Per stack a 3x3 conv and two residual blocks of two 3x3 convs; each pool halves
    the size, rounded up (84 -> 42 -> 21 -> 11); then dense 256."""
    size, inputs, expected = FRAMES[0], FRAMES[2], 0
    for channels in IMPALA_CHANNELS:
        expected += conv_params(3, inputs, channels)
        expected += 2 * IMPALA_BLOCKS * conv_params(3, channels, channels)
        size, inputs = math.ceil(size / 2), channels
    expected += size * size * inputs * IMPALA_FEATURES + IMPALA_FEATURES
    assert IMPALA_CHANNELS == (16, 32, 32) and IMPALA_BLOCKS == 2 and IMPALA_FEATURES == 256
    params = jax.eval_shape(ImpalaTorso().init, jax.random.key(0), frames(1))
    assert num_params(params) == expected


def test_config_names_the_torsos_and_their_widths():
    assert set(IMAGE_TORSO_FEATURES) == set(IMAGE_TORSOS)
    assert IMAGE_TORSO_FEATURES == {"nature": NATURE_FEATURES, "impala": IMPALA_FEATURES}
    config = PPOConfig(torso="impala", hidden_sizes=())
    assert config.torso_spec().image == "impala" and config.widest_layer == IMPALA_FEATURES
    assert PPOConfig(torso="cnn").torso_spec().image == ""
    with pytest.raises(ConfigError, match="hidden_sizes"):
        jaxrl_async.load_config("ppo_cartpole", ["agent.hidden_sizes=[]"])


def test_nature_is_refused_on_a_non_image_env_and_on_small_images():
    config = jaxrl_async.load_config("ppo_cartpole", ["agent.torso=nature"])
    with pytest.raises(ConfigError, match="torso=nature needs an image observation") as error:
        build_pipeline(config)
    assert "\n" not in str(error.value)
    # The smallest image whose last VALID conv has one pixel: 8 + 4 * (4 + 2 * (3 - 1) - 1).
    assert min_image_size("nature") == 36 and min_image_size("impala") == 1
    check_image_observation("nature", {"image": (36, 40, 4), "mask": (2,)}, "env")
    with pytest.raises(ConfigError, match="at least 36x36") as error:
        check_image_observation("nature", (35, 84, 4), "env")
    assert "\n" not in str(error.value)
    check_image_observation("impala", (10, 10, 4), "Breakout-MinAtar")
    check_image_observation("mlp", (3,), "CartPole-v1")


def test_dqn_replay_keeps_uint8_frames():
    """The pipeline's replay, as initialised and after a tick that stores transitions
    (shapes only: traced, not run), holds obs and next_obs as the env's uint8."""
    config = jaxrl_async.load_config(
        "dqn_cartpole", DQN_TINY + ["agent.torso=nature", "agent.hidden_sizes=[]"]
    )
    pipeline, _ = build_pipeline(config, env=FrameEnv(min_image_size("nature")))
    state = jax.eval_shape(pipeline.init, jax.random.key(0))
    after, _ = jax.eval_shape(pipeline.tick, state)
    for replay in (state.replay, after.replay):
        items = replay.ring.items if hasattr(replay, "ring") else replay.items
        assert items.obs.dtype == jnp.uint8 and items.next_obs.dtype == jnp.uint8
        assert items.obs.shape[-3:] == (36, 36, 4)


def test_every_head_reads_frames_through_an_image_torso():
    """A Q-network over uint8 frames: the image torso's layers in its tree, [B, A] out."""
    config = DQNConfig(torso="impala", hidden_sizes=())
    net = jaxrl_async.nn.networks.QNetwork(3, config.torso_spec())
    x = frames(2, (10, 10, 4))
    out, params = jax.eval_shape(net.init_with_output, jax.random.key(0), x)
    assert "ImpalaTorso_0" in params["params"]["Encoder_0"]
    assert out.shape == (2, 3)


@pytest.mark.slow
def test_impala_torso_trains_ppo_on_minatar():
    """A few PPO updates on Breakout-MinAtar (10x10x4 frames) with the IMPALA torso."""
    config = jaxrl_async.load_config(
        "ppo_breakout_minatar",
        [
            "agent.torso=impala",
            "agent.hidden_sizes=[]",
            "env.num_envs=4",
            "pipeline.rollout_len=8",
            "agent.num_minibatches=2",
            "agent.num_epochs=1",
            "train.total_steps=96",
            "train.log_every=32",
            "train.progress=false",
            "eval.every=0",
        ],
    )
    result = jaxrl_async.train(config)
    assert int(result.state.env_steps) == 96
    assert np.all(np.isfinite(result.metrics["loss"]))
