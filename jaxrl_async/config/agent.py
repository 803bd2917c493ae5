"""The part of every agent's config that the run reads: the network body, the
capabilities (`AgentConfig.off_policy`, `recurrent`, `minibatches`, `check`) and the
field checks agents share. The algorithms' own settings are in `agents.py`."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, ClassVar

from jaxrl_async.errors import ConfigError, require

# The activations nn/networks.py maps to flax functions (a test keeps the two lists equal).
ACTIVATION_NAMES = ("gelu", "relu", "silu", "tanh")
IMPALA_OPTIMIZERS = ("adam", "rmsprop")
DQN_LOSSES = ("huber", "mse")
TORSOS = ("mlp", "cnn", "nature", "impala")
# The published image torsos (nn/torsos.py) and the width of their last, dense layer
# (a test keeps the two equal; kept here so that configs load without flax)
IMAGE_TORSO_FEATURES = {"nature": 512, "impala": 256}
MEMORIES = ("none", "gru", "lstm")  # cells.CELLS, and none: a memoryless network


def field_checks(config, section: str = "agent"):
    """need(ok, key, requirement): a ConfigError naming `section.key` and its value unless
    ok; and the checks every agent's network fields share, already run."""

    def need(ok, key, requirement):
        require(ok, f"{section}.{key}", getattr(config, key), requirement)

    # An image torso ends in a dense layer of its own, so it needs no MLP after it.
    need(
        (len(config.hidden_sizes) >= 1 or config.torso in IMAGE_TORSO_FEATURES)
        and min(config.hidden_sizes, default=1) >= 1,
        "hidden_sizes",
        "a non-empty list of positive ints (empty allowed with agent.torso=nature or impala)",
    )
    need(config.activation in ACTIVATION_NAMES, "activation", f"one of {list(ACTIVATION_NAMES)}")
    need(config.torso in TORSOS, "torso", f"one of {list(TORSOS)}")
    for key in ("cnn_channels", "cnn_kernels", "cnn_strides"):
        need(
            len(getattr(config, key)) >= 1 and min(getattr(config, key)) >= 1,
            key,
            "a non-empty list of positive ints",
        )
    need(
        len(config.cnn_channels) == len(config.cnn_kernels) == len(config.cnn_strides),
        "cnn_channels",
        "as long as agent.cnn_kernels and agent.cnn_strides",
    )
    need(config.memory in MEMORIES, "memory", f"one of {list(MEMORIES)}")
    need(config.memory_size >= 1, "memory_size", ">= 1")
    return need


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    """What every agent's config has: the network body and the capabilities the run
    reads to lay itself out (`pipeline/layout.py`) and to check the other sections.

    The body (`networks.TorsoSpec`): `torso=cnn` sends image observations [H, W, C]
    through the conv layers (one per entry of the cnn_* lists) before the MLP of
    `hidden_sizes`; `nature` and `impala` through the published Nature DQN or IMPALA
    ResNet torso (`nn/torsos.py`; `hidden_sizes=[]` leaves no MLP after it); `mlp`
    flattens them. `memory=gru` or `lstm` feeds the torso into a recurrent cell of
    `memory_size` units (PPO, IMPALA, R2D2; `agents/actor_critic.py`).

    `DATA` is "trajectory" for an on-policy agent (it learns from each rollout) and
    "replay" for an off-policy one (it learns from a replay, checked against `replay`).
    """

    DATA: ClassVar[str] = "trajectory"
    SWEEPABLE: ClassVar[tuple[str, ...]] = ()

    name: str = ""
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    torso: str = "mlp"
    cnn_channels: tuple[int, ...] = (16,)
    cnn_kernels: tuple[int, ...] = (3,)
    cnn_strides: tuple[int, ...] = (1,)
    memory: str = "none"
    memory_size: int = 128

    def torso_spec(self):
        from jaxrl_async.nn.networks import TorsoSpec

        conv = (
            tuple(zip(self.cnn_channels, self.cnn_kernels, self.cnn_strides))
            if self.torso == "cnn"
            else ()
        )
        image = self.torso if self.torso in IMAGE_TORSO_FEATURES else ""
        return TorsoSpec(tuple(self.hidden_sizes), self.activation, conv, image=image)

    def memory_spec(self):
        """The recurrent cell (cells.MemorySpec), or None for a memoryless network."""
        from jaxrl_async.nn.cells import MemorySpec

        return None if self.memory == "none" else MemorySpec(self.memory, self.memory_size)

    @property
    def off_policy(self) -> bool:
        """Learns from a replay rather than from each rollout."""
        return self.DATA == "replay"

    @property
    def recurrent(self) -> bool:
        return self.memory != "none"

    @property
    def minibatches(self) -> int:
        """Gradient steps a rollout is cut into per epoch (on-policy agents; 1 otherwise)."""
        return 1

    @property
    def widest_layer(self) -> int:
        return max((*self.hidden_sizes, IMAGE_TORSO_FEATURES.get(self.torso, 0)))

    def check(self, config, devices: int = 1) -> None:
        """Checks that need the other sections of the run's `config`, with its batches
        split over `devices` (1 when the config loads; the run's own count when the
        layout is chosen). None by default."""


def check_env_minibatches(config, devices: int, why: str) -> None:
    """A ConfigError unless agent.num_minibatches divides the envs each of `devices`
    holds (minibatches that are groups of whole envs)."""
    minibatches = config.agent.num_minibatches
    local_envs = config.env.num_envs // devices
    if local_envs % minibatches:
        where = "" if devices == 1 else f" / {devices} devices = {local_envs} envs per device"
        raise ConfigError(
            f"agent.num_minibatches={minibatches} does not divide "
            f"env.num_envs={config.env.num_envs}{where} ({why})"
        )


def memoryless_only(need, config, algo: str) -> None:
    need(
        config.memory == "none",
        "memory",
        f"none: {algo} has no recurrent network (ppo and impala have)",
    )


def check_epsilon_fields(need, config) -> None:
    """The epsilon-greedy actor's fields (agents/exploration.py), in DQN, R2D2 and PQN."""
    for key in ("epsilon_start", "epsilon_end", "apex_epsilon"):
        need(0 <= getattr(config, key) <= 1, key, "in [0, 1]")
    need(config.epsilon_decay_steps >= 1, "epsilon_decay_steps", ">= 1")
    need(config.apex_alpha >= 0, "apex_alpha", ">= 0")


def check_dqn_fields(need, config) -> None:
    """The checks of DQNConfig's fields, which R2D2Config inherits (memory aside)."""
    need(config.learning_rate >= 0, "learning_rate", ">= 0 (0: no learning, a control)")
    need(config.adam_eps > 0, "adam_eps", "> 0")
    need(config.max_grad_norm > 0, "max_grad_norm", "> 0")
    need(0 <= config.gamma <= 1, "gamma", "in [0, 1]")
    need(config.n_step >= 1, "n_step", ">= 1")
    need(config.loss in DQN_LOSSES, "loss", f"one of {list(DQN_LOSSES)}")
    need(config.huber_delta > 0, "huber_delta", "> 0")
    need(config.target_update_every >= 1, "target_update_every", ">= 1")
    need(0 < config.tau <= 1, "tau", "in (0, 1]")
    check_epsilon_fields(need, config)
    need(config.updates_per_tick >= 1, "updates_per_tick", ">= 1")


def check_twin_critic_fields(need, config) -> None:
    """The checks of the fields SACConfig and TD3Config share."""
    need(config.learning_rate >= 0, "learning_rate", ">= 0 (0: no learning, a control)")
    need(config.adam_eps > 0, "adam_eps", "> 0")
    need(0 <= config.gamma <= 1, "gamma", "in [0, 1]")
    need(config.n_step >= 1, "n_step", ">= 1")
    need(0 < config.tau <= 1, "tau", "in (0, 1]")
    need(config.updates_per_tick >= 1, "updates_per_tick", ">= 1")
    need(config.reward_scale > 0, "reward_scale", "> 0")
    need(config.max_grad_norm >= 0, "max_grad_norm", ">= 0 (0: no clipping)")
    memoryless_only(need, config, config.name)


def bind(config, hparams: dict[str, Any]):
    """`config` with its SWEEPABLE fields set to `hparams` (traced values of the learner
    state), for an agent's learn step to read as it reads any field. No checks run: the
    values are tracers, checked as numbers when the run or sweep was configured."""
    bound = copy.copy(config)
    for key, value in hparams.items():
        object.__setattr__(bound, key, value)
    return bound
