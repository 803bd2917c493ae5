"""jaxrl_async: asynchronous actor-learner RL inside one XLA program.

`load_config` needs only the config schema; `train`, `resume` and `make` import JAX,
the networks and the agents on first use, so loading a config stays cheap.
"""

from jaxrl_async._xla_flags import apply_default_xla_flags

apply_default_xla_flags()

from jaxrl_async.config.loader import Config, load_config  # noqa: E402
from jaxrl_async.errors import (  # noqa: E402
    ConfigError,
    EnvSpecError,
    TrainingDiverged,
    TrainingInterrupted,
)

_LAZY = {
    "train": "jaxrl_async.training.trainer",
    "resume": "jaxrl_async.training.trainer",
    "TrainResult": "jaxrl_async.training.result",
    "make": "jaxrl_async.envs",
    "sweep": "jaxrl_async.training.sweeps",
    "resume_sweep": "jaxrl_async.training.sweeps",
    "choose_layout": "jaxrl_async.pipeline.layout",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'jaxrl_async' has no attribute {name!r}")


__all__ = [
    "Config",
    "ConfigError",
    "EnvSpecError",
    "TrainResult",
    "TrainingDiverged",
    "TrainingInterrupted",
    "choose_layout",
    "load_config",
    "make",
    "resume",
    "resume_sweep",
    "sweep",
    "train",
]
__version__ = "0.1.0"
