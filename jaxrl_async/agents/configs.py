"""The settings of every algorithm, and the registry that maps `agent.name` to them.

Only dataclasses live here, so loading and validating a config imports no network or
optimizer library; an algorithm's module (flax, optax) is imported when the run builds
it (`make_agent`). To add an algorithm: its config class here, its `make_<algo>` in a
module of its own, and one line in AGENTS.

Each config checks its own ranges in `__post_init__` (a one-line ConfigError naming
the key); `check(config)` adds checks that need the other sections. `DATA = "replay"`
marks an off-policy agent, whose config is then also checked against `replay`.

`SWEEPABLE` names the numeric fields the agent reads as traced values of its learner state
(`hparams`), so that one compiled program trains runs that differ in them (sweeps,
`jaxrl_async.sweep`); every other field shapes the program and is compiled in.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from jaxrl_async.agents.agent_config import (
    ACTIVATION_NAMES,
    DQN_LOSSES,
    IMPALA_OPTIMIZERS,
    MEMORIES,
    TORSOS,
    AgentConfig,
    bind,
    check_dqn_fields,
    check_env_minibatches,
    check_epsilon_fields,
    check_twin_critic_fields,
    field_checks,
    memoryless_only,
)
from jaxrl_async.errors import ConfigError

__all__ = [
    "ACTIVATION_NAMES",
    "AGENTS",
    "AGENT_CONFIGS",
    "DQN_LOSSES",
    "IMPALA_OPTIMIZERS",
    "MEMORIES",
    "TORSOS",
    "AgentConfig",
    "DQNConfig",
    "IMPALAConfig",
    "PPOConfig",
    "PQNConfig",
    "R2D2Config",
    "SACConfig",
    "TD3Config",
    "bind",
]


@dataclasses.dataclass(frozen=True)
class PPOConfig(AgentConfig):
    SWEEPABLE: ClassVar[tuple[str, ...]] = (
        "learning_rate",
        "gamma",
        "gae_lambda",
        "clip_eps",
        "ent_coef",
        "vf_coef",
        "max_grad_norm",
        "reward_scale",
    )

    name: str = "ppo"
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    clip_value: bool = True
    ent_coef: float = 0.01
    reward_scale: float = 1.0  # multiplies rewards before GAE (keeps value targets O(1))
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    num_epochs: int = 4
    num_minibatches: int = 4
    normalize_advantages: bool = True
    adam_eps: float = 1e-5
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"

    def __post_init__(self):
        need = field_checks(self)

        need(self.learning_rate >= 0, "learning_rate", ">= 0 (0: no learning, a control)")
        need(0 <= self.gamma <= 1, "gamma", "in [0, 1]")
        need(0 <= self.gae_lambda <= 1, "gae_lambda", "in [0, 1]")
        need(self.clip_eps > 0, "clip_eps", "> 0")
        need(self.ent_coef >= 0, "ent_coef", ">= 0")
        need(self.reward_scale > 0, "reward_scale", "> 0")
        need(self.vf_coef >= 0, "vf_coef", ">= 0")
        need(self.max_grad_norm > 0, "max_grad_norm", "> 0")
        need(self.num_epochs >= 1, "num_epochs", ">= 1")
        need(self.num_minibatches >= 1, "num_minibatches", ">= 1")
        need(self.adam_eps > 0, "adam_eps", "> 0")

    @property
    def minibatches(self) -> int:
        return self.num_minibatches

    def check(self, config, devices: int = 1) -> None:
        """Cross-section checks: minibatches take equal blocks of every env's time steps,
        or, with memory, whole sequences of groups of envs."""
        if self.memory != "none":
            check_env_minibatches(config, devices, "recurrent PPO minibatches are groups of envs")
        elif config.pipeline.rollout_len % self.num_minibatches:
            raise ConfigError(
                f"agent.num_minibatches={self.num_minibatches} does not divide "
                f"pipeline.rollout_len={config.pipeline.rollout_len} (each minibatch takes "
                f"an equal share of every env's steps)"
            )


@dataclasses.dataclass(frozen=True)
class IMPALAConfig(AgentConfig):
    SWEEPABLE: ClassVar[tuple[str, ...]] = (
        "learning_rate",
        "gamma",
        "vtrace_lambda",
        "clip_rho_threshold",
        "clip_pg_rho_threshold",
        "baseline_coef",
        "ent_coef",
        "reward_scale",
        "max_grad_norm",
    )

    name: str = "impala"
    learning_rate: float = 1e-3
    anneal_lr: bool = True
    optimizer: str = "adam"
    optimizer_eps: float = 1e-5
    # Adam's first-moment decay. Momentum averages the gradients of the last ~1/(1 - b1)
    # steps, a delay in the policy's feedback that adds to the pipeline's lag; lower it
    # when the actor acts with stale parameters (see configs/impala_cartpole.yaml).
    adam_b1: float = 0.9
    gamma: float = 0.99
    vtrace_lambda: float = 1.0
    clip_rho_threshold: float = 1.0
    clip_pg_rho_threshold: float = 1.0
    baseline_coef: float = 0.5
    ent_coef: float = 0.01
    reward_scale: float = 1.0  # multiplies rewards before V-trace (keeps value targets O(1))
    max_grad_norm: float = 0.5
    num_epochs: int = 1
    num_minibatches: int = 1  # splits the envs (B) of a rollout, each minibatch whole in time
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"

    def __post_init__(self):
        need = field_checks(self)

        need(self.learning_rate >= 0, "learning_rate", ">= 0 (0: no learning, a control)")
        need(self.optimizer in IMPALA_OPTIMIZERS, "optimizer", f"one of {list(IMPALA_OPTIMIZERS)}")
        need(self.optimizer_eps > 0, "optimizer_eps", "> 0")
        need(0 <= self.adam_b1 < 1, "adam_b1", "in [0, 1)")
        need(0 <= self.gamma <= 1, "gamma", "in [0, 1]")
        need(0 <= self.vtrace_lambda <= 1, "vtrace_lambda", "in [0, 1]")
        need(self.clip_rho_threshold > 0, "clip_rho_threshold", "> 0")
        need(self.clip_pg_rho_threshold > 0, "clip_pg_rho_threshold", "> 0")
        need(self.baseline_coef >= 0, "baseline_coef", ">= 0")
        need(self.ent_coef >= 0, "ent_coef", ">= 0")
        need(self.reward_scale > 0, "reward_scale", "> 0")
        need(self.max_grad_norm > 0, "max_grad_norm", "> 0")
        need(self.num_epochs >= 1, "num_epochs", ">= 1")
        need(self.num_minibatches >= 1, "num_minibatches", ">= 1")

    @property
    def minibatches(self) -> int:
        return self.num_minibatches

    def check(self, config, devices: int = 1) -> None:
        """Cross-section checks: minibatches must split each device's envs evenly."""
        check_env_minibatches(config, devices, "IMPALA minibatches split the envs")


@dataclasses.dataclass(frozen=True)
class PQNConfig(AgentConfig):
    """PQN (agents/pqn.py): Q(lambda) on each rollout of many envs, no replay, no target
    network, LayerNorm in the Q-network (`layer_norm`). The epsilon fields mean what they
    mean for dqn (agents/exploration.py); the epsilons are the actor's, compiled in."""

    SWEEPABLE: ClassVar[tuple[str, ...]] = (
        "learning_rate",
        "gamma",
        "q_lambda",
        "max_grad_norm",
        "reward_scale",
    )

    name: str = "pqn"
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True
    adam_eps: float = 1e-5
    max_grad_norm: float = 10.0
    gamma: float = 0.99
    q_lambda: float = 0.65
    reward_scale: float = 1.0  # multiplies rewards before Q(lambda) (keeps Q-values O(1))
    num_epochs: int = 4
    num_minibatches: int = 4  # each takes an equal share of every env's steps
    layer_norm: bool = True
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    epsilon_decay_steps: int = 100_000
    per_env_epsilon: bool = False
    apex_epsilon: float = 0.4
    apex_alpha: float = 7.0
    hidden_sizes: tuple[int, ...] = (128, 128)
    activation: str = "relu"

    def __post_init__(self):
        need = field_checks(self)

        need(self.learning_rate >= 0, "learning_rate", ">= 0 (0: no learning, a control)")
        need(self.adam_eps > 0, "adam_eps", "> 0")
        need(self.max_grad_norm > 0, "max_grad_norm", "> 0")
        need(0 <= self.gamma <= 1, "gamma", "in [0, 1]")
        need(0 <= self.q_lambda <= 1, "q_lambda", "in [0, 1]")
        need(self.reward_scale > 0, "reward_scale", "> 0")
        need(self.num_epochs >= 1, "num_epochs", ">= 1")
        need(self.num_minibatches >= 1, "num_minibatches", ">= 1")
        check_epsilon_fields(need, self)
        memoryless_only(need, self, "pqn")

    @property
    def minibatches(self) -> int:
        return self.num_minibatches

    def check(self, config, devices: int = 1) -> None:
        if config.pipeline.rollout_len % self.num_minibatches:
            raise ConfigError(
                f"agent.num_minibatches={self.num_minibatches} does not divide "
                f"pipeline.rollout_len={config.pipeline.rollout_len} (each minibatch takes "
                f"an equal share of every env's steps)"
            )


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


# agent.name -> (its config class, "module:factory" imported when a run builds it)
AGENTS: dict[str, tuple[type[AgentConfig], str]] = {
    "ppo": (PPOConfig, "jaxrl_async.agents.ppo:make_ppo"),
    "impala": (IMPALAConfig, "jaxrl_async.agents.impala:make_impala"),
    "pqn": (PQNConfig, "jaxrl_async.agents.pqn:make_pqn"),
    "dqn": (DQNConfig, "jaxrl_async.agents.dqn:make_dqn"),
    "sac": (SACConfig, "jaxrl_async.agents.sac:make_sac"),
    "r2d2": (R2D2Config, "jaxrl_async.agents.r2d2:make_r2d2"),
    "td3": (TD3Config, "jaxrl_async.agents.td3:make_td3"),
}
AGENT_CONFIGS: dict[str, type[AgentConfig]] = {name: cls for name, (cls, _) in AGENTS.items()}
