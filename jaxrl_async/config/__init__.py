"""A run's config: the schema and its checks, and the shipped configs.

`loader.py` composes the sections into `Config` and loads a config by name or path with
overrides; `sections.py` holds every section but the agent's; `agent.py` the part of an
agent's settings the run reads, `agents.py` and `replay_agents.py` each algorithm's own
and the registry `agent.name` picks from; `yaml/` the shipped configs. Nothing here
imports JAX: loading a config stays cheap.
"""

from jaxrl_async.config.loader import Config, available_configs, load_config, with_overrides

__all__ = ["Config", "available_configs", "load_config", "with_overrides"]
