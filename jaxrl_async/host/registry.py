"""The host envs by name, for `jaxrl-async envs`: every id Gymnasium has registered
(with ale-py's Atari ids when ale-py is installed), as `env.name=gymnasium:<id>` takes
them, and every EnvPool task, as `env.name=envpool:<task>` takes them."""

from __future__ import annotations

import importlib.util

# Each host suite: (what env.name takes, the extra that installs it).
HOST_LISTINGS = {
    "gymnasium": ("gymnasium:<id>", "gymnasium"),
    "envpool": ("envpool:<task>", "envpool"),
}


def gymnasium_ids() -> list[str] | None:
    """Gymnasium's registered ids, sorted (None: Gymnasium is not installed)."""
    if importlib.util.find_spec("gymnasium") is None:
        return None
    import gymnasium

    if importlib.util.find_spec("ale_py") is not None:
        import ale_py

        gymnasium.register_envs(ale_py)
    return sorted(gymnasium.registry)


def envpool_ids() -> list[str] | None:
    """EnvPool's tasks, sorted (None: envpool is not installed)."""
    if importlib.util.find_spec("envpool") is None:
        return None
    from jaxrl_async.host.envpool_env import envpool_tasks

    return envpool_tasks()


def host_ids(suite: str) -> list[str] | None:
    """The ids of the host suite `suite` (a key of HOST_LISTINGS); None: not installed."""
    return {"gymnasium": gymnasium_ids, "envpool": envpool_ids}[suite]()
