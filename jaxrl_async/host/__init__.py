"""Host environments: envs stepped on the host in numpy (Gymnasium, and later ale-py and
EnvPool), for an actor–learner split with actor threads.

What exists: the adapters, which build a vector env by name, map its spaces onto the
`EnvSpec` the JAX suites use and give every step as a `HostStep` with exact episode
semantics. Training on them (the actor threads, the queue of trajectories, the learner)
is not built yet.
"""

from jaxrl_async.host.episodes import EpisodeTotals, episodes_init, episodes_update
from jaxrl_async.host.gymnasium_env import GymnasiumVecEnv, make_gymnasium, parse_name
from jaxrl_async.host.host_env import HostEnv, HostStep
from jaxrl_async.host.spaces import HostSpaces, map_spaces

__all__ = [
    "EpisodeTotals",
    "GymnasiumVecEnv",
    "HostEnv",
    "HostSpaces",
    "HostStep",
    "episodes_init",
    "episodes_update",
    "make_gymnasium",
    "map_spaces",
    "parse_name",
]
