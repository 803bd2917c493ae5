"""An actor thread: one host vector env, the agent's own `act` jitted on the actor's
device, and trajectories [T, B_k] handed to the learner through a bounded queue.

Each trajectory is the `types.Transition` pytree the JAX pipeline's rollout builds, in
numpy: obs, action, reward, terminated, truncated, next_obs (the observation the action
led to, before any reset: a truncation bootstraps from it), the agent's extras (behaviour
log-probabilities) and version, the update count of the parameters that acted, on every
step. The policy (`policy.py`) follows the JAX rollout's rule for randomness, so the
actions do not depend on how the envs are split over actor threads.

A recurrent agent's actor keeps each env's carry across steps and rounds as the JAX
rollout does (`rollout.rollout_step`): every env starts at an episode's start (the
agent's `init_carry`), and after a step whose episode ended (terminated or truncated)
the env's next step is an episode start, where the agent resets the carry before it
reads the observation. Each step of the trajectory records the `Memory` the actor acted
from (the carry before that reset, and the episode-start flag), which the agent's
`learn` re-runs its sequences from.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxrl_async.host.groups import Group, check_obs, grouped_rollout, join_envs
from jaxrl_async.host.gymnasium_env import GymnasiumVecEnv
from jaxrl_async.host.host_env import HostStep
from jaxrl_async.host.obs_norm import ObsStats, moments, seed_slice
from jaxrl_async.host.params import ParamStore
from jaxrl_async.host.policy import ActorPolicy
from jaxrl_async.host.stall import Doing
from jaxrl_async.host.stopping import RunStop, put
from jaxrl_async.types import Memory, Transition


class Trajectory(NamedTuple):
    """What an actor hands the learner for one round."""

    round_index: int
    actor: int
    traj: Transition  # numpy [T, B_k, ...]
    episode_returns: np.ndarray  # float64: raw returns of the episodes that ended in it
    episode_lengths: np.ndarray  # int64: their lengths
    env_seconds: float = 0.0  # the actor's time in env.step for this round
    policy_seconds: float = 0.0  # ... and in the policy (inference and its transfers)
    dispatch_seconds: float = 0.0  # ... of which dispatching its calls (`groups.ActorSeconds`)
    obs_moments: ObsStats | None = None  # env.normalize_obs: of the raw observations acted on
    # the actor's whole round: env, policy, and building the trajectory and its episodes
    round_seconds: float = 0.0
    # An actor process's CPU seconds since its last round (its whole process, every
    # thread: `actor_process.py`); 0 for an actor thread, whose CPU is the run's process's.
    cpu_seconds: float = 0.0


class ActorPlan(NamedTuple):
    """One actor's share of the run."""

    actor: int  # k, the actor's number
    first_env: int  # the global index of its first env
    num_envs: int  # the run's envs over all actors
    rounds: int  # the round it ends before (the run's updates)
    rollout_len: int  # T
    seed: int  # its envs reset from reset_seed(plan) + i
    device: Any = None  # where it acts (None: JAX's default device)
    first_round: int = 0  # where it starts: 0, or the round a resumed run continues at
    raw_obs: bool = False  # trajectories of raw observations (a replay's) under statistics
    # train.num_seeds > 1: the run (seed) it acts for, its slice of the seed-stacked
    # parameters and statistics the learner publishes; None: a run of one seed
    seed_index: int | None = None


def reset_seed(plan: ActorPlan) -> int:
    """The seed of the actor's first env's reset: seed + its global index, shifted by
    num_envs per round already trained, so a resumed run's envs restart from fresh
    seeded resets that no earlier reset of the run used."""
    return plan.seed + plan.first_round * plan.num_envs + plan.first_env


class Acting(NamedTuple):
    """What acts a round: the parameters (on the actor's device), their version and,
    under env.normalize_obs, the observation statistics published with them."""

    params: Any
    version: int
    obs_stats: ObsStats | None = None
    raw_obs: bool = False  # the trajectory keeps raw observations (`ActorPlan.raw_obs`)


def rollout(
    env: GymnasiumVecEnv,
    policy: ActorPolicy,
    acting: Acting,
    start: tuple[Any, Memory | None],
    first_step: int,
    length: int,
    doing: Doing | None = None,
) -> tuple[tuple[Any, Memory | None], Transition, list[HostStep], tuple[float, float]]:
    """`length` steps of `env` from `start` = (the observation, the envs' Memory or None)
    with `acting`: (where the next round starts, the trajectory [T, B_k, ...] in numpy,
    the steps as given, (seconds in env.step, seconds in the policy)). With observation
    statistics the policy sees, and the trajectory holds, observations normalised by them
    (`next_obs` too); the steps keep the raw ones. With `acting.raw_obs` (a replay
    agent's: its learner normalises what it samples) the trajectory holds the raw ones
    too, the policy still acting on normalised ones. `doing` is marked with where it is.
    One group of `groups.grouped_rollout`, which an actor of several groups runs."""
    doing = doing if doing is not None else Doing()
    starts, traj, steps, seconds = grouped_rollout(
        [Group(env, policy)], acting, [start], first_step, length, doing
    )
    return starts[0], traj, steps, (seconds.env, seconds.policy)


def _obs_moments(first_obs: Any, host_steps: list[HostStep], acting: Acting) -> ObsStats | None:
    """The moments of the raw observations a round acted on (None without statistics)."""
    if acting.obs_stats is None:
        return None
    raw = np.stack([first_obs, *(s.obs for s in host_steps[:-1])])
    return moments(raw, acting.obs_stats.mean.shape)


def _episodes(host_steps: list[HostStep]) -> tuple[np.ndarray, np.ndarray]:
    """The raw returns and lengths of the episodes that ended in these steps, in order."""
    done = np.stack([s.done for s in host_steps])
    returns = np.stack([s.episode_return for s in host_steps])[done]
    lengths = np.stack([s.episode_length for s in host_steps])[done]
    return returns.astype(np.float64), lengths.astype(np.int64)


def _for_seed(published, seed_index: int | None) -> tuple[Any, ObsStats | None]:
    """(parameters, statistics) of run `seed_index` of seed-stacked ones (None: as they are)."""
    if seed_index is None:
        return published.params, published.obs_stats
    stats = published.obs_stats
    params = jax.tree.map(lambda x: x[seed_index], published.params)
    return params, None if stats is None else seed_slice(stats, seed_index)


class Exchange(NamedTuple):
    """What the learner shares with every actor thread: the parameters it publishes per
    round slot, and the run's stop (set by either side)."""

    store: ParamStore
    stop: RunStop


def run_actor(
    groups: Sequence[Group],
    plan: ActorPlan,
    exchange: Exchange,
    out: queue.Queue,
    memory: Memory | None = None,
    doing: Doing | None = None,
) -> None:
    """The actor thread's body: rounds `plan.first_round` to `plan.rounds` of its env
    `groups` (`groups.py`: their envs side by side, in order) into `out`, each acted by
    the parameters its round's slot holds (on the plan's device); a recurrent agent's
    carries start from `memory` (`Agent.initial_memory` of all its envs: every env at an
    episode's start). Any exception, an env's or a non-finite step's, stops the run as
    one line naming the env; the envs are closed however the thread ends. `doing` is
    marked with where the thread is (the stall watch's line, `stall.py`)."""
    device = plan.device or jax.devices()[0]
    store, stop = exchange
    doing = doing if doing is not None else Doing()
    try:
        doing.now = "reset"
        starts = _reset(groups, plan, jax.device_get(memory))
        doing.now = "round"
        acting: Acting | None = None
        acting_slot = -1
        for i in range(plan.first_round, plan.rounds):
            slot = store.slot_of(i)
            if slot != acting_slot:
                published = store.wait(slot, stop)
                if published is None:
                    return
                params, stats = _for_seed(published, plan.seed_index)
                params = jax.device_put(params, device)
                acting = Acting(params, published.version, stats, plan.raw_obs)
                acting_slot = slot
            assert acting is not None
            started = time.perf_counter()
            first_obs = join_envs([start[0] for start in starts], axis=0)
            starts, traj, host_steps, seconds = grouped_rollout(
                groups, acting, starts, i * plan.rollout_len, plan.rollout_len, doing
            )
            returns, lengths = _episodes(host_steps)
            stats = _obs_moments(first_obs, host_steps, acting)
            spent = time.perf_counter() - started
            handed = Trajectory(i, plan.actor, traj, returns, lengths, *seconds, stats, spent)
            if not put(out, handed, stop):
                return
    except Exception as e:  # noqa: BLE001  (an env may raise anything; reported in one line)
        stop.fail(groups[0].env.name, plan.actor, e)
    finally:
        for group in groups:
            group.env.close()


def _reset(groups: Sequence[Group], plan: ActorPlan, memory: Memory | None) -> list:
    """Each group's first (observation, Memory): its envs reset from the seeds of their
    global indices, its slice of the actor's initial memory."""
    starts, first = [], 0
    for group in groups:
        n = group.env.num_envs
        obs = group.env.reset(reset_seed(plan) + first)
        check_obs(obs, "observation")
        mine = (
            None if memory is None else jax.tree.map(lambda x, a=first, b=first + n: x[a:b], memory)
        )
        starts.append((obs, mine))
        first += n
    return starts
