"""Algorithms: each module holds its config, its loss and `make_<algo>` returning an Agent."""

from jaxrl_async.agents.base import Agent, BuildContext
from jaxrl_async.agents.impala import IMPALAConfig, make_impala
from jaxrl_async.agents.ppo import PPOConfig, make_ppo

AGENT_CONFIGS = {"ppo": PPOConfig, "impala": IMPALAConfig}
AGENT_FACTORIES = {"ppo": make_ppo, "impala": make_impala}


def make_agent(config, ctx: BuildContext) -> Agent:
    return AGENT_FACTORIES[config.name](config, ctx)


__all__ = ["AGENT_CONFIGS", "Agent", "BuildContext", "IMPALAConfig", "PPOConfig", "make_agent",
           "make_impala", "make_ppo"]
