"""The settings of every algorithm, and the registry that maps `agent.name` to them.

Only dataclasses live here, so loading and validating a config imports no network or
optimizer library; an algorithm's module (flax, optax) is imported when the run builds
it (`make_agent`). To add an algorithm: its config class here (an off-policy one in
replay_agents.py), its `make_<algo>` in a module of its own, and one line in AGENTS.

Each config checks its own ranges in `__post_init__` (a one-line ConfigError naming
the key); `check(config)` adds checks that need the other sections. `DATA = "replay"`
marks an off-policy agent, whose config is then also checked against `replay`.

`SWEEPABLE` names the numeric fields the agent reads as traced values of its learner state
(`hparams`), so that one compiled program trains runs that differ in them (sweeps,
`jaxrl_async.sweep`); every other field shapes the program and is compiled in.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jaxrl_async.config.agent import (
    ACTIVATION_NAMES,
    DQN_LOSSES,
    IMPALA_OPTIMIZERS,
    MEMORIES,
    TORSOS,
    AgentConfig,
    bind,
    check_env_minibatches,
    check_epsilon_fields,
    field_checks,
    memoryless_only,
)
from jaxrl_async.config.replay_agents import DQNConfig, R2D2Config, SACConfig, TD3Config
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
    # One torso for the policy and value heads (a memoryless network; a recurrent one
    # always shares): half an image torso's cost; off, each head has its own.
    shared_torso: bool = False

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
    # when the actor acts with stale parameters (see yaml/impala_cartpole.yaml).
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
    shared_torso: bool = False  # as PPOConfig's

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
