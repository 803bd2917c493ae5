"""The host envs by name, for `jaxrl-async envs`: every id Gymnasium has registered
(with ale-py's Atari ids when ale-py is installed), as `env.name=gymnasium:<id>` takes
them."""

from __future__ import annotations

import importlib.util


def gymnasium_ids() -> list[str] | None:
    """Gymnasium's registered ids, sorted (None: Gymnasium is not installed)."""
    if importlib.util.find_spec("gymnasium") is None:
        return None
    import gymnasium

    if importlib.util.find_spec("ale_py") is not None:
        import ale_py

        gymnasium.register_envs(ale_py)
    return sorted(gymnasium.registry)
