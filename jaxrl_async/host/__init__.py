"""Host environments: envs stepped on the host in numpy (Gymnasium, Atari through ale-py,
EnvPool), for an actor–learner split with actor threads.

What exists: the adapters, which build a vector env by name (`make_host_env`: by the
name's prefix, `gymnasium:<id>` or `envpool:<task>`), map its spaces onto the
`EnvSpec` the JAX suites use and give every step as a `HostStep` with exact episode
semantics; and the actor–learner executor (`executor.train_host`, and `run.py` for the
CLI's runs with logs and checkpoints): actor threads, bounded queues of trajectories
tagged with the parameter version that acted them, the learner running the agent's own
`learn` (on-policy agents, recurrent PPO and IMPALA among them) or a replay on its
device (off-policy agents, R2D2's sequence replay among them).
"""

from jaxrl_async.host.actor import ActorPlan, Trajectory
from jaxrl_async.host.by_name import make_host_env
from jaxrl_async.host.envpool_env import make_envpool
from jaxrl_async.host.episodes import EpisodeTotals, episodes_init, episodes_update
from jaxrl_async.host.executor import (
    make_actor_envs,
    make_host_agent,
    record_hook,
    run_executor,
    train_host,
)
from jaxrl_async.host.gymnasium_env import GymnasiumVecEnv, make_gymnasium, parse_name
from jaxrl_async.host.host_env import HostEnv, HostStep
from jaxrl_async.host.params import ParamStore, Published
from jaxrl_async.host.spaces import HostSpaces, map_spaces
from jaxrl_async.host.stopping import ActorError, RunStop

__all__ = [
    "ActorError",
    "ActorPlan",
    "EpisodeTotals",
    "GymnasiumVecEnv",
    "HostEnv",
    "HostSpaces",
    "HostStep",
    "ParamStore",
    "Published",
    "RunStop",
    "Trajectory",
    "episodes_init",
    "episodes_update",
    "make_actor_envs",
    "make_envpool",
    "make_gymnasium",
    "make_host_agent",
    "make_host_env",
    "map_spaces",
    "parse_name",
    "record_hook",
    "run_executor",
    "train_host",
]
