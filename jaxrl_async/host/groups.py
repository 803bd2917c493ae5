"""An actor's envs in groups whose policy calls overlap each other's env steps
(`pipeline.env_groups`; Sample Factory's double-buffered sampling).

An actor thread with G groups holds G vector envs over consecutive slices of its envs and
a policy for each. Each step it takes group g's actions (dispatched before, computed by
XLA while the other groups stepped), steps group g's envs and at once dispatches group
g's next policy call, then turns to group g + 1: the policy's compute runs beside the
env steps of the other groups instead of after its own. That needs a call that returns
before its result is computed, as a call on an accelerator does; on a CPU the package
runs JAX's computations inline (`jaxrl_async/_xla_flags.py`, faster for an actor than
dispatching them), so there a call computes before it returns and the groups overlap
nothing.

Nothing about the run changes with G: every env keeps its global index (its reset seed
and its per-step key), so the actions, the trajectory [T, B_k] (the groups' envs
side by side in order) and the episodes are those of one group. G = 1 is the plain
actor: fetch, step, dispatch the next call, and check and record the step while XLA
computes that call.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxrl_async.host.host_env import HostStep
from jaxrl_async.host.obs_norm import normalize
from jaxrl_async.host.policy import ActorPolicy
from jaxrl_async.host.stall import Doing
from jaxrl_async.types import Memory, Transition


class Group(NamedTuple):
    """One group of an actor's envs and the policy compiled for them."""

    env: Any  # a HostEnv over the group's envs
    policy: ActorPolicy  # the agent's act for the group's envs (`policy.py`)


def split_sizes(num_envs: int, groups: int) -> list[int]:
    """Consecutive group sizes covering `num_envs` envs, as even as can be."""
    return [len(part) for part in np.array_split(np.arange(num_envs), groups)]


class EnvGroups:
    """One actor's envs as several host envs over consecutive slices (`parts`), seen from
    outside as one: its name, its envs in all, their spec."""

    def __init__(self, parts: Sequence[Any]):
        self.parts = list(parts)
        self.name, self.spec = self.parts[0].name, self.parts[0].spec
        self.num_envs = sum(part.num_envs for part in self.parts)

    def close(self) -> None:
        for part in self.parts:
            part.close()


def join_envs(trees: Sequence[Any], axis: int) -> Any:
    """The groups' pytrees joined along their env axis (one group's as it is)."""
    if len(trees) == 1:
        return trees[0]
    return jax.tree.map(lambda *xs: np.concatenate(xs, axis=axis), *trees)


class ActorSeconds(NamedTuple):
    """An actor round's seconds: in env.step, and in the policy, which is dispatching
    its calls (the Python side of a JAX call: arguments in, the program launched) and
    waiting for their results (their compute and their transfer to the host). The two
    last are not told apart: a sync between them costs more than the transfer (about
    45 us a call on a CPU, against the one fetch that overlaps the end of the compute)."""

    env: float
    policy: float  # dispatch + waiting for the results
    dispatch: float


class _Timer:
    def __init__(self) -> None:
        self.env = self.dispatch = self.result = 0.0

    def seconds(self) -> ActorSeconds:
        return ActorSeconds(self.env, self.dispatch + self.result, self.dispatch)


def grouped_rollout(
    groups: Sequence[Group],
    acting,
    starts: list[tuple[Any, Memory | None]],
    first_step: int,
    length: int,
    doing: Doing,
) -> tuple[list[tuple[Any, Memory | None]], Transition, list[HostStep], ActorSeconds]:
    """`length` steps of every group from `starts` (each group's observation and Memory)
    with `acting` (parameters, version, statistics, raw_obs: `actor.Acting`): (where each
    group's next round starts, the trajectory [T, B_k] of all groups, the steps [B_k]
    as given, where the time went: ActorSeconds)."""
    params, version, stats, raw_obs = acting
    seen = (lambda o: o) if stats is None else (lambda o: normalize(stats, o))
    kept = (lambda o: o) if raw_obs else seen  # what the trajectory holds
    obs, memory = [s[0] for s in starts], [s[1] for s in starts]
    steps: list[list[Transition]] = [[] for _ in groups]
    host_steps: list[list[HostStep]] = [[] for _ in groups]
    timer = _Timer()

    def dispatch(g: int, t: int):
        acted = seen(obs[g])
        policy = groups[g].policy
        return acted, policy.dispatch(prepared[g], memory[g], acted, np.int32(first_step + t))

    started = time.perf_counter()
    prepared = [group.policy.prepare(params) for group in groups]
    pending = [dispatch(g, 0) for g in range(len(groups))]
    timer.dispatch += time.perf_counter() - started
    for t in range(length):
        for g, group in enumerate(groups):
            started = time.perf_counter()
            doing.now = "policy"
            observed, out = pending[g]
            carry, action, extras = group.policy.fetch(out)
            stepped = time.perf_counter()
            timer.result += stepped - started
            doing.now = "step"
            step = group.env.step(action)
            doing.now = "round"
            timer.env += time.perf_counter() - stepped
            held = obs[g] if raw_obs else observed  # what the trajectory holds
            acted_from = memory[g]
            obs[g], memory[g] = step.obs, _next_memory(memory[g], carry, step)
            if t + 1 < length:  # computed while this step is checked and recorded
                started = time.perf_counter()
                pending[g] = dispatch(g, t + 1)
                timer.dispatch += time.perf_counter() - started
            _check_step(step)
            steps[g].append(_transition(held, action, extras, step, kept, version, acted_from))
            host_steps[g].append(step)
    traj = join_envs([jax.tree.map(lambda *xs: np.stack(xs), *s) for s in steps], axis=1)
    joined = [join_envs([h[t] for h in host_steps], axis=0) for t in range(length)]
    return list(zip(obs, memory)), traj, joined, timer.seconds()


def _transition(obs, action, extras, step: HostStep, kept, version: int, memory) -> Transition:
    """One step's Transition in numpy leaves, as the JAX rollout's: `next_obs` the step's
    final observation as the trajectory holds it (`kept`), every env tagged `version`."""
    fields: dict[str, Any] = {
        "obs": obs,
        "action": action,
        "reward": step.reward,
        "terminated": step.terminated,
        "truncated": step.truncated,
        "next_obs": kept(step.final_obs),
        "extras": extras,
        "version": np.full(step.reward.shape, version, np.int32),
        "memory": memory,
    }
    return Transition(**fields)


def _next_memory(memory: Memory | None, carry: Any, step: HostStep) -> Memory | None:
    """What each env's next step acts from: the carry `act` returned, and an episode
    start where this step ended the episode (the JAX rollout's rule)."""
    if memory is None:
        return None
    return Memory(carry, step.terminated | step.truncated)


def _check_step(step: HostStep) -> None:
    """A ValueError of one line for a step that cannot become a transition."""
    if not np.all(step.valid):
        raise ValueError("a next-step autoreset step (not a transition) is not supported yet")
    if not np.all(np.isfinite(step.reward)):
        bad = np.flatnonzero(~np.isfinite(step.reward))
        raise ValueError(f"non-finite reward in envs {bad.tolist()}")
    check_obs(step.obs, "observation")
    if step.final_obs is not step.obs:  # an episode ended: its final observation apart
        check_obs(step.final_obs, "final observation")


def check_obs(obs: Any, what: str) -> None:
    """A ValueError of one line naming the envs whose observation is not finite."""
    for leaf in [obs] if isinstance(obs, np.ndarray) else jax.tree.leaves(obs):
        if leaf.dtype.kind == "f" and not np.isfinite(leaf).all():
            bad = np.flatnonzero(~np.isfinite(leaf).reshape(len(leaf), -1).all(axis=1))
            raise ValueError(f"non-finite {what} in envs {bad.tolist()}")
