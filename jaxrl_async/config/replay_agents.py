"""The settings of the off-policy algorithms (DQN, R2D2, SAC, TD3): agents that learn from
a replay (`DATA = "replay"`), so the run also checks their config against `replay`.
Registered with the others in `configs.AGENTS`."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from jaxrl_async.config.agent import (
    AgentConfig,
    check_dqn_fields,
    check_twin_critic_fields,
    field_checks,
    memoryless_only,
)
from jaxrl_async.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class DQNConfig(AgentConfig):
    DATA: ClassVar[str] = "replay"
    # gamma and n_step shape what the replay stores; the epsilons are the actor's
    SWEEPABLE: ClassVar[tuple[str, ...]] = ("learning_rate", "max_grad_norm", "huber_delta", "tau")

    name: str = "dqn"
    learning_rate: float = 2.5e-4
    anneal_lr: bool = False
    adam_eps: float = 1e-5
    max_grad_norm: float = 10.0
    gamma: float = 0.99
    n_step: int = 1
    double: bool = True
    dueling: bool = False
    loss: str = "huber"
    huber_delta: float = 1.0
    # The target network moves every `target_update_every` learner updates by
    # target <- tau * online + (1 - tau) * target: tau 1 copies, tau 0.005 with every 1
    # is Polyak averaging.
    target_update_every: int = 50
    tau: float = 1.0
    # Linear epsilon schedule over env steps (all envs), or Ape-X's fixed per-env epsilons.
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    epsilon_decay_steps: int = 250_000
    per_env_epsilon: bool = False
    apex_epsilon: float = 0.4
    apex_alpha: float = 7.0
    updates_per_tick: int = 1
    hidden_sizes: tuple[int, ...] = (120, 84)
    activation: str = "relu"

    def __post_init__(self):
        need = field_checks(self)

        check_dqn_fields(need, self)
        memoryless_only(need, self, "dqn")


@dataclasses.dataclass(frozen=True)
class R2D2Config(DQNConfig):
    """Recurrent DQN on replayed sequences (agents/r2d2.py): DQN's fields, meaning what
    they mean for dqn, with defaults of their own; the replay holds sequences of
    `sequence_length` steps overlapping by `sequence_overlap` (replay.capacity counts
    sequences), of which the first `burn_in` only warm up the carry."""

    SWEEPABLE: ClassVar[tuple[str, ...]] = (
        "learning_rate",
        "max_grad_norm",
        "huber_delta",
        "tau",
        "priority_eta",
        "rescale_eps",
    )

    name: str = "r2d2"
    learning_rate: float = 1e-3
    adam_eps: float = 1e-3
    n_step: int = 3
    loss: str = "mse"
    target_update_every: int = 100
    epsilon_decay_steps: int = 100_000
    hidden_sizes: tuple[int, ...] = (64,)
    memory: str = "gru"
    memory_size: int = 64
    sequence_length: int = 20
    sequence_overlap: int = 10
    burn_in: int = 5
    # A sequence's priority: eta * max |TD| + (1 - eta) * mean |TD| over its trained steps.
    priority_eta: float = 0.9
    # Targets through h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x and its inverse.
    value_rescale: bool = True
    rescale_eps: float = 1e-3

    def __post_init__(self):
        need = field_checks(self)

        check_dqn_fields(need, self)
        need(self.memory != "none", "memory", "gru or lstm: r2d2 is recurrent")
        need(self.sequence_length >= 1, "sequence_length", ">= 1")
        need(
            0 <= self.sequence_overlap < self.sequence_length,
            "sequence_overlap",
            "in [0, agent.sequence_length)",
        )
        need(
            0 <= self.burn_in < self.sequence_length,
            "burn_in",
            "in [0, agent.sequence_length): some steps must be trained",
        )
        need(0 <= self.priority_eta <= 1, "priority_eta", "in [0, 1]")
        need(self.rescale_eps > 0, "rescale_eps", "> 0")

    def check(self, config, devices: int = 1) -> None:
        """Sequences start every stride = length - overlap steps of each env, the same
        steps in every tick only if the stride divides the rollout."""
        stride = self.sequence_length - self.sequence_overlap
        if config.pipeline.rollout_len % stride:
            raise ConfigError(
                f"agent.sequence_length={self.sequence_length} - agent.sequence_overlap="
                f"{self.sequence_overlap} = {stride} does not divide pipeline.rollout_len="
                f"{config.pipeline.rollout_len} (a sequence starts every {stride} steps)"
            )


@dataclasses.dataclass(frozen=True)
class SACConfig(AgentConfig):
    DATA: ClassVar[str] = "replay"
    # max_grad_norm is not: 0 compiles no clipping at all
    SWEEPABLE: ClassVar[tuple[str, ...]] = (
        "learning_rate",
        "tau",
        "reward_scale",
        "target_entropy",
    )

    name: str = "sac"
    learning_rate: float = 3e-4
    adam_eps: float = 1e-8
    gamma: float = 0.99
    n_step: int = 1
    tau: float = 0.005  # Polyak step of the target critics, once per update
    updates_per_tick: int = 1
    reward_scale: float = 1.0  # multiplies the (n-step) rewards in the critic's target
    init_alpha: float = 1.0
    target_entropy: float | None = None  # None: -action_dim
    max_grad_norm: float = 0.0  # clip the joint gradient norm; 0: no clipping
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "relu"

    def __post_init__(self):
        need = field_checks(self)

        check_twin_critic_fields(need, self)
        need(self.init_alpha > 0, "init_alpha", "> 0")
        need(
            self.target_entropy is None or math.isfinite(self.target_entropy),
            "target_entropy",
            "a finite number or null (-action_dim)",
        )


@dataclasses.dataclass(frozen=True)
class TD3Config(AgentConfig):
    """TD3 (agents/td3.py). The noise scales are standard deviations in the actor's
    (-1, 1)^A action space, whatever the env's bounds; the exploration noise is the
    actor's, so not sweepable."""

    DATA: ClassVar[str] = "replay"
    SWEEPABLE: ClassVar[tuple[str, ...]] = (
        "learning_rate",
        "tau",
        "reward_scale",
        "policy_noise",
        "noise_clip",
    )

    name: str = "td3"
    learning_rate: float = 3e-4  # the actor's and the critics' (two Adams)
    adam_eps: float = 1e-8
    gamma: float = 0.99
    n_step: int = 1
    tau: float = 0.005  # Polyak step of the target actor and critics, once per actor update
    updates_per_tick: int = 1  # critic updates
    reward_scale: float = 1.0  # multiplies the (n-step) rewards in the critics' target
    policy_delay: int = 2  # the actor and the targets move every policy_delay-th update
    policy_noise: float = 0.2  # target policy smoothing: std of the target action's noise
    noise_clip: float = 0.5  # ... clipped to [-noise_clip, noise_clip]
    exploration_noise: float = 0.1  # std of the Gaussian noise the actor adds when acting
    max_grad_norm: float = 0.0  # clip each gradient's norm (actor, critics); 0: no clipping
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "relu"

    def __post_init__(self):
        need = field_checks(self)

        check_twin_critic_fields(need, self)
        need(self.policy_delay >= 1, "policy_delay", ">= 1")
        for key in ("policy_noise", "noise_clip", "exploration_noise"):
            need(getattr(self, key) >= 0, key, ">= 0")
