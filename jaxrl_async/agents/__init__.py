"""Algorithms: each module holds its loss and `make_<algo>` returning an Agent; their
settings live in config/agents.py, whose AGENTS registry imports a module only to build it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from jaxrl_async.config.agents import AGENT_CONFIGS, AGENTS

if TYPE_CHECKING:  # the types import JAX; loading a config must not
    from jaxrl_async.types import Agent, BuildContext


def agent_factory(name: str):
    """The `make_<algo>(config, ctx) -> Agent` of `agent.name` (imports its module)."""
    module, factory = AGENTS[name][1].split(":")
    return getattr(importlib.import_module(module), factory)


def make_agent(config, ctx: BuildContext) -> Agent:
    return agent_factory(config.name)(config, ctx)


__all__ = ["AGENTS", "AGENT_CONFIGS", "agent_factory", "make_agent"]
