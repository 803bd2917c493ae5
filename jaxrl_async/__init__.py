"""jaxrl_async: asynchronous actor-learner RL inside one XLA program."""

from jaxrl_async._xla_flags import apply_default_xla_flags

apply_default_xla_flags()

from jaxrl_async.config import Config, ConfigError, load_config  # noqa: E402
from jaxrl_async.envs import EnvSpecError, make  # noqa: E402
from jaxrl_async.errors import TrainingInterrupted  # noqa: E402
from jaxrl_async.train import TrainResult, resume, train  # noqa: E402

__all__ = [
    "Config",
    "ConfigError",
    "EnvSpecError",
    "TrainResult",
    "TrainingInterrupted",
    "load_config",
    "make",
    "resume",
    "train",
]
__version__ = "0.1.0"
