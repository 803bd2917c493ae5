"""The image torsos of two published agents, for `agent.torso=nature` and `impala`: an
image [B, H, W, C] (frames stacked on the channels by the env) -> features [B, F].

- `nature`: the Nature DQN network (Mnih et al. 2015): conv 32 8x8 stride 4, 64 4x4
  stride 2, 64 3x3 stride 1 (VALID padding, as published: 84x84 -> 20 -> 9 -> 7), relu
  after each, flatten, dense 512 relu. VALID padding needs an image of at least
  `min_image_size("nature")` pixels a side; smaller ones are refused when the run is
  built (`check_image_observation`).
- `impala`: the IMPALA ResNet (Espeholt et al. 2018): three stacks of (16, 32, 32)
  channels, each a 3x3 conv, a 3x3 max-pool of stride 2 and two residual blocks
  (relu, conv, relu, conv, plus the skip), all SAME padding (any image size), then relu,
  flatten, dense 256 relu.

uint8 frames are scaled to [0, 1] inside the network (so a replay keeps them uint8);
float frames pass unchanged. The activation is relu, as published, whatever
`agent.activation` says (that one is the MLP's). With `layer_norm` (PQN) a LayerNorm
over the channels or features comes before every relu.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from jaxrl_async.errors import ConfigError
from jaxrl_async.nn import conv
from jaxrl_async.nn.initializers import orthogonal

NATURE_CONV = ((32, 8, 4), (64, 4, 2), (64, 3, 1))  # (channels, kernel, stride)
NATURE_FEATURES = 512
IMPALA_CHANNELS = (16, 32, 32)  # one stack each
IMPALA_BLOCKS = 2  # residual blocks per stack
IMPALA_FEATURES = 256


def unit_frames(x):
    """`x` as float32 in [0, 1] if uint8 (divided by 255); any other dtype unchanged."""
    return x.astype(jnp.float32) / 255.0 if x.dtype == jnp.uint8 else x


def _conv(channels: int, kernel: int, stride: int = 1, padding: str = "SAME") -> nn.Conv:
    return nn.Conv(
        channels,
        (kernel, kernel),
        (stride, stride),
        padding=padding,
        kernel_init=orthogonal(np.sqrt(2)),
        bias_init=nn.initializers.zeros,
        conv_general_dilated=conv.conv_general_dilated,  # fast gradients inside loops
    )


def _dense(features: int) -> nn.Dense:
    return nn.Dense(features, kernel_init=orthogonal(np.sqrt(2)), bias_init=nn.initializers.zeros)


class Relu(nn.Module):
    """relu over the last axis, after a LayerNorm of its own if `layer_norm`."""

    layer_norm: bool = False

    @nn.compact
    def __call__(self, x):
        return nn.relu(nn.LayerNorm()(x) if self.layer_norm else x)


class NatureTorso(nn.Module):
    """Nature DQN: three VALID convs, flatten, dense 512 (relu after each)."""

    layer_norm: bool = False

    @nn.compact
    def __call__(self, x):
        x = unit_frames(x)
        for channels, kernel, stride in NATURE_CONV:
            x = Relu(self.layer_norm)(_conv(channels, kernel, stride, "VALID")(x))
        x = x.reshape(x.shape[0], -1)
        return Relu(self.layer_norm)(_dense(NATURE_FEATURES)(x))


class ResidualBlock(nn.Module):
    """x + conv(relu(conv(relu(x)))), 3x3 convs keeping the channels."""

    channels: int
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x):
        y = _conv(self.channels, 3)(Relu(self.layer_norm)(x))
        y = _conv(self.channels, 3)(Relu(self.layer_norm)(y))
        return x + y


class ImpalaStack(nn.Module):
    """conv 3x3, max-pool 3x3 stride 2 (SAME: the size halves, rounded up), then the
    residual blocks."""

    channels: int
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x):
        x = _conv(self.channels, 3)(x)
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        for _ in range(IMPALA_BLOCKS):
            x = ResidualBlock(self.channels, self.layer_norm)(x)
        return x


class ImpalaTorso(nn.Module):
    """IMPALA ResNet: the three stacks, relu, flatten, dense 256 relu."""

    layer_norm: bool = False

    @nn.compact
    def __call__(self, x):
        x = unit_frames(x)
        for channels in IMPALA_CHANNELS:
            x = ImpalaStack(channels, self.layer_norm)(x)
        x = Relu(self.layer_norm)(x).reshape(x.shape[0], -1)
        return Relu(self.layer_norm)(_dense(IMPALA_FEATURES)(x))


IMAGE_TORSOS = {"nature": NatureTorso, "impala": ImpalaTorso}
IMAGE_TORSO_NAMES = ("cnn", *IMAGE_TORSOS)  # the agent.torso values that need an image


def min_image_size(torso: str) -> int:
    """The smallest height and width `torso` reads: with VALID convs, the size whose
    last layer's output is one pixel (1 for a torso of SAME padding only)."""
    if torso != "nature":
        return 1
    size = 1
    for _, kernel, stride in reversed(NATURE_CONV):
        size = (size - 1) * stride + kernel
    return size


def check_image_observation(torso: str, obs_shape, env_name: str) -> None:
    """A one-line ConfigError unless `torso` (agent.torso) can read the observation
    `obs_shape` (a shape, or a dict of them): an image torso needs an image entry
    [H, W, C], and every image entry at least `min_image_size` a side."""
    if torso not in IMAGE_TORSO_NAMES:
        return
    shapes = obs_shape.values() if isinstance(obs_shape, dict) else [obs_shape]
    images = [tuple(s) for s in shapes if len(s) == 3]
    if not images:
        raise ConfigError(
            f"agent.torso={torso} needs an image observation [H, W, C]; "
            f"{env_name} observes {obs_shape}"
        )
    least = min_image_size(torso)
    small = [s for s in images if min(s[:2]) < least]
    if small:
        raise ConfigError(
            f"agent.torso={torso} needs images of at least {least}x{least} pixels "
            f"(its convs have VALID padding); {env_name} observes {obs_shape}: use "
            f"agent.torso=impala or cnn"
        )
