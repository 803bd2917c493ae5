"""An actor thread: one host vector env, the agent's own `act` jitted on the actor's
device, and trajectories [T, B_k] handed to the learner through a bounded queue.

Each trajectory is the `types.Transition` pytree the JAX pipeline's rollout builds, in
numpy: obs, action, reward, terminated, truncated, next_obs (the observation the action
led to, before any reset: a truncation bootstraps from it), the agent's extras (behaviour
log-probabilities) and version, the update count of the parameters that acted, on every
step. Randomness follows the JAX rollout's rule: the key of global step s is the actor
key folded with s, and each env's key that one folded with the env's global index, so
the actions do not depend on how the envs are split over actor threads.

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
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.host.gymnasium_env import GymnasiumVecEnv
from jaxrl_async.host.host_env import HostStep
from jaxrl_async.host.obs_norm import ObsStats, moments, normalize, seed_slice
from jaxrl_async.host.params import ParamStore
from jaxrl_async.host.stall import Doing
from jaxrl_async.host.stopping import RunStop, put
from jaxrl_async.types import ActorClock, Agent, Memory, Transition


class Trajectory(NamedTuple):
    """What an actor hands the learner for one round."""

    round_index: int
    actor: int
    traj: Transition  # numpy [T, B_k, ...]
    episode_returns: np.ndarray  # float64: raw returns of the episodes that ended in it
    episode_lengths: np.ndarray  # int64: their lengths
    env_seconds: float = 0.0  # the actor's time in env.step for this round
    policy_seconds: float = 0.0  # ... and in the policy (inference and its transfers)
    obs_moments: ObsStats | None = None  # env.normalize_obs: of the raw observations acted on


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


def make_policy(agent: Agent, key: jax.Array, plan: ActorPlan, local_envs: int) -> Callable:
    """policy(params, memory, obs [B_k, ...], step) -> ActOutput(carry, action, extras):
    the agent's `act` at global step `step`, jitted (compiled on the device its parameters
    are on), `memory` the envs' Memory [B_k, ...] (None for a memoryless agent, whose
    carry is then None)."""
    index = plan.first_env + jnp.arange(local_envs, dtype=jnp.int32)
    num_envs = plan.num_envs

    def policy(params, memory, obs, step):
        step_key = jax.random.fold_in(key, step)
        keys = jax.vmap(jax.random.fold_in, (None, 0))(step_key, index)
        clock = ActorClock(step * num_envs, index, num_envs)
        carry, episode_start = (None, None) if memory is None else memory
        return agent.act(params, carry, obs, episode_start, keys, clock)

    return jax.jit(policy)


def act(policy: Callable, params: Any, memory: Memory | None, obs: Any, step: int):
    """(carry, action, extras) in numpy: `policy` at global step `step` (the carry None
    for a memoryless agent)."""
    return jax.device_get(policy(params, memory, obs, np.int32(step)))


def next_memory(memory: Memory | None, carry: Any, step: HostStep) -> Memory | None:
    """What each env's next step acts from: the carry `act` returned, and an episode
    start where this step ended the episode (the JAX rollout's rule)."""
    if memory is None:
        return None
    return Memory(carry, step.terminated | step.truncated)


def _check_obs(obs: Any, what: str) -> None:
    for leaf in jax.tree.leaves(obs):
        if np.issubdtype(leaf.dtype, np.floating) and not np.all(np.isfinite(leaf)):
            bad = np.flatnonzero(~np.isfinite(leaf).reshape(len(leaf), -1).all(axis=1))
            raise ValueError(f"non-finite {what} in envs {bad.tolist()}")


def _check_step(step: HostStep) -> None:
    """A ValueError of one line for a step that cannot become a transition."""
    if not np.all(step.valid):
        raise ValueError("a next-step autoreset step (not a transition) is not supported yet")
    if not np.all(np.isfinite(step.reward)):
        bad = np.flatnonzero(~np.isfinite(step.reward))
        raise ValueError(f"non-finite reward in envs {bad.tolist()}")
    _check_obs(step.obs, "observation")
    _check_obs(step.final_obs, "final observation")


class Acting(NamedTuple):
    """What acts a round: the parameters (on the actor's device), their version and,
    under env.normalize_obs, the observation statistics published with them."""

    params: Any
    version: int
    obs_stats: ObsStats | None = None
    raw_obs: bool = False  # the trajectory keeps raw observations (`ActorPlan.raw_obs`)


def rollout(
    env: GymnasiumVecEnv,
    policy: Callable,
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
    too, the policy still acting on normalised ones. `doing` is marked with where it is."""
    doing = doing if doing is not None else Doing()
    params, version, stats, raw_obs = acting
    seen = (lambda o: o) if stats is None else (lambda o: normalize(stats, o))
    kept = (lambda o: o) if raw_obs else seen  # what the trajectory holds
    obs, memory = start
    steps: list[Transition] = []
    host_steps: list[HostStep] = []
    env_seconds = policy_seconds = 0.0
    for t in range(length):
        started = time.perf_counter()
        observed = seen(obs)  # what the policy acts on (and, but for raw_obs, the trajectory)
        doing.now = "policy"
        carry, action, extras = act(policy, params, memory, observed, first_step + t)
        stepped = time.perf_counter()
        doing.now = "step"
        step = env.step(action)
        doing.now = "round"
        env_seconds += time.perf_counter() - stepped
        policy_seconds += stepped - started
        _check_step(step)
        fields: dict[str, Any] = {
            "obs": obs if raw_obs else observed,
            "action": action,
            "reward": step.reward,
            "terminated": step.terminated,
            "truncated": step.truncated,
            "next_obs": kept(step.final_obs),
            "extras": extras,
            "version": np.full(step.reward.shape, version, np.int32),
            "memory": memory,
        }
        steps.append(Transition(**fields))
        host_steps.append(step)
        obs, memory = step.obs, next_memory(memory, carry, step)
    traj = jax.tree.map(lambda *xs: np.stack(xs), *steps)
    return (obs, memory), traj, host_steps, (env_seconds, policy_seconds)


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
    env: GymnasiumVecEnv,
    policy: Callable,
    plan: ActorPlan,
    exchange: Exchange,
    out: queue.Queue,
    memory: Memory | None = None,
    doing: Doing | None = None,
) -> None:
    """The actor thread's body: rounds `plan.first_round` to `plan.rounds` into `out`,
    each acted by the parameters its round's slot holds (on `policy`'s device); a
    recurrent agent's carries start from `memory` (`Agent.initial_memory`: every env at
    an episode's start). Any exception, the env's or a non-finite step's, stops the run
    as one line naming the env; the env is closed however the thread ends. `doing` is
    marked with where the thread is (the stall watch's line, `stall.py`)."""
    device = plan.device or jax.devices()[0]
    store, stop = exchange
    doing = doing if doing is not None else Doing()
    try:
        doing.now = "reset"
        start = (env.reset(reset_seed(plan)), jax.device_get(memory))
        doing.now = "round"
        _check_obs(start[0], "observation")
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
            first_obs = start[0]
            start, traj, host_steps, seconds = rollout(
                env, policy, acting, start, i * plan.rollout_len, plan.rollout_len, doing
            )
            returns, lengths = _episodes(host_steps)
            stats = _obs_moments(first_obs, host_steps, acting)
            handed = Trajectory(i, plan.actor, traj, returns, lengths, *seconds, stats)
            if not put(out, handed, stop):
                return
    except Exception as e:  # noqa: BLE001  (an env may raise anything; reported in one line)
        stop.fail(env.name, plan.actor, e)
    finally:
        env.close()
