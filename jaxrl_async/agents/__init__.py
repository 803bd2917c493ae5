"""Algorithms: each module holds its config, its loss and `make_<algo>` returning an Agent."""

from jaxrl_async.agents.base import Agent, BuildContext
from jaxrl_async.agents.dqn import DQNConfig, make_dqn
from jaxrl_async.agents.impala import IMPALAConfig, make_impala
from jaxrl_async.agents.ppo import PPOConfig, make_ppo
from jaxrl_async.agents.sac import SACConfig, make_sac

AGENT_CONFIGS = {"ppo": PPOConfig, "impala": IMPALAConfig, "dqn": DQNConfig, "sac": SACConfig}
AGENT_FACTORIES = {"ppo": make_ppo, "impala": make_impala, "dqn": make_dqn, "sac": make_sac}


def make_agent(config, ctx: BuildContext) -> Agent:
    return AGENT_FACTORIES[config.name](config, ctx)


__all__ = ["AGENT_CONFIGS", "Agent", "BuildContext", "DQNConfig", "IMPALAConfig", "PPOConfig",
           "SACConfig", "make_agent", "make_dqn", "make_impala", "make_ppo", "make_sac"]
