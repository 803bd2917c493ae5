"""The actor–learner executor for host envs: actor threads step their envs and hand
trajectories through bounded queues; the learner, in the calling thread, runs the agent's
own `learn` on each round of them and publishes parameters back. With pipeline.devices
the learner's `learn` runs over a mesh of devices, each round's envs split over them and
the gradients averaged as in a JAX run (`placement.py`, `mesh_learn.py`). An off-policy agent's
learner stores each round in a replay on its device and learns from that instead
(`replay_learner.py`).

- Actors: `pipeline.actor_threads` threads, thread k owning a host env (`by_name.py`:
  Gymnasium's or EnvPool's) over its slice of `env.num_envs` (env i of a fresh run resets
  from `train.seed + i`), acting with the agent's `act` jitted on the actor's device
  (`actor.py`); a recurrent agent's actor keeps each env's carry across rounds and
  records it in the trajectory as the JAX rollout does, so its own `learn` re-runs the
  sequences unchanged.
- Rounds: the learner's r-th step consumes round r of every actor, concatenated over
  envs into the [T, B] trajectory the JAX pipeline would hand `agent.learn` (off-policy:
  store in the replay, then `updates_per_tick` updates once learning has started; the
  round counts as one update, as a tick of the JAX pipeline does).
- Versions: round i is acted by parameter slot max(0, i - lag) (`params.py`), so every
  sample's version tag is exact and `policy_lag` is measured from the tags;
  `pipeline.max_staleness` skips updates on older data as `ticks.make_learn` does. Each
  actor's queue holds at most lag + 1 trajectories, and the wait for parameters bounds
  the lag at `pipeline.lag`. Lag 0 is the synchronous reference. Nothing depends on
  timing, so a seed gives the same run at any lag, over any number of actor threads.
- Processes: over several (`jax.distributed`) each process's actors step its share of
  the envs, at their global indices, and the rounds, records and observation moments
  are agreed and gathered over the processes (`processes.py`).
- Stopping (`stopping.py`): every wait polls one stop event, set when the run ends, when
  an actor fails (re-raised here as an `ActorError` of one line) or from outside. An
  actor that hands in no round for `env.stall_seconds` ends the run too (`stall.py`: an
  `ActorStalled`), its thread left behind.

Envs reset within the step (same-step autoreset: Gymnasium's sync vector envs, EnvPool's
pools through their same-step shim), so every step is a transition. A step that is none
(`HostStep.valid` false: a next-step reset) would end the run in one line from the actor
(`actor._check_step`); no env built here gives one.
"""

from __future__ import annotations

import math
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxrl_async._xla_flags import host_cpu_dispatch
from jaxrl_async.config.host_devices import host_learner_devices
from jaxrl_async.config.loader import Config
from jaxrl_async.errors import ConfigError
from jaxrl_async.host.actor import ActorPlan, Exchange, Trajectory, run_actor
from jaxrl_async.host.actor_build import actor_env, actor_groups, actor_key, host_agent, made
from jaxrl_async.host.actor_process import ActorProcess, relay
from jaxrl_async.host.by_name import HOST_NAMES
from jaxrl_async.host.groups import split_sizes
from jaxrl_async.host.gymnasium_env import GymnasiumVecEnv
from jaxrl_async.host.mesh_learn import mesh_learn, one_device
from jaxrl_async.host.obs_norm import ObsStats, initial_stats, merge, stack
from jaxrl_async.host.params import ParamStore
from jaxrl_async.host.placement import host_devices, host_mesh
from jaxrl_async.host.processes import (
    agree,
    failed_elsewhere,
    gathered_moments,
    gathered_record,
    global_batch,
    process_envs,
    processes,
    replicated,
)
from jaxrl_async.host.replay_learner import ReplayLearner, resumed
from jaxrl_async.host.round_times import ACTOR_TIMES, RoundTimes
from jaxrl_async.host.seeds import batched, fold, run_key, run_seeds
from jaxrl_async.host.stall import Doing, StallWatch
from jaxrl_async.host.stopping import RunStop, get
from jaxrl_async.pipeline.sharding import AXIS
from jaxrl_async.types import Agent, LearnFn, Transition

JOIN_SECONDS = 10.0  # how long the learner waits for each actor thread to end


def make_actor_envs(config: Config) -> list[GymnasiumVecEnv]:
    """One host env per actor thread (`pipeline.actor_threads` a seed, for each of
    train.num_seeds) over its slice of `env.num_envs` (same-step autoreset, so that every
    step is a transition; observations masked by env.mask_obs, `by_name.make_run_env`),
    its envs in pipeline.env_groups groups (`groups.py`); with pipeline.actor_processes
    each actor's envs are built in its own process, which stands in their place
    (`actor_process.ActorProcess`). The config was validated when loaded
    (`config._validate_host`): what the executor does not run is refused there."""
    if not config.env.host:
        raise ConfigError(f"env.name must be a host env ({HOST_NAMES}) for the host executor")
    host_devices(config)  # too few devices for the run: refused before any env is built
    threads = config.pipeline.actor_threads
    _, local_envs = process_envs(config)  # every env, but with several processes their share
    sizes = split_sizes(local_envs, threads)
    sizes *= config.train.num_seeds  # each seed's own envs (`seeds.py`), seed by seed
    if config.pipeline.actor_processes:  # each actor's envs built in its own process
        return made(sizes, lambda size: ActorProcess(config, size))
    return made(sizes, lambda size: actor_env(config, size))


def make_host_agent(config: Config, spec) -> Agent:
    """The agent of `config.agent` for envs of `spec` (`actor_build.host_agent`). On a
    learner mesh of several devices it is built with axis_name=AXIS, so its `learn`,
    mapped over the mesh (`mesh_learn.py`), averages over the devices as a JAX run's
    does; on one device with no axis, so no collective is compiled. Its `act`, `init` and
    `greedy` run outside the mesh, as a JAX run's evaluation runs its `greedy`: they
    reduce over no devices."""
    axis_name = AXIS if host_learner_devices(config) > 1 else None
    return host_agent(config, spec, axis_name)


class Learner(NamedTuple):
    """The learner's side: the agent's `learn` jitted (over the learner's mesh), its key
    and the staleness bound."""

    learn: LearnFn
    key: jax.Array  # folded with the round number for each update
    max_staleness: int  # -1: never skip
    device: Any  # where the learner state lives: a device, or the mesh's replicated sharding
    rounds: int  # the round the run ends before: one update per round
    replay: ReplayLearner | None = None  # off-policy agents: the replay's learner step
    batch_at: Any = None  # where a round's trajectory goes (split on B); None: `device`
    seeds: tuple[int, ...] | None = None  # seed-batched runs' seeds (`seeds.py`); None: one


class Progress(NamedTuple):
    """The learner's counts between rounds."""

    state: Any  # the agent's learner state
    updates: int  # updates applied (the version of the newest parameters)
    rounds: int  # rounds consumed, a resumed run's earlier ones included
    episode_returns: list  # raw returns of every episode that ended, in round order
    replay: Any = None  # off-policy: the ReplayCarry (replay and carried window)
    obs_stats: ObsStats | None = None  # env.normalize_obs: every round's so far, merged


class Start(NamedTuple):
    """Where a run starts: a fresh learner state at round 0, or a restored one."""

    state: Any
    updates: int = 0
    round: int = 0
    replay: Any = None  # off-policy: the ReplayCarry to continue from (None: a fresh one)
    obs_stats: ObsStats | None = None  # env.normalize_obs: the statistics to continue from


def next_round(
    queues: Sequence[queue.Queue], stop: RunStop, watch: StallWatch | None = None
) -> list[Trajectory] | None:
    """Round r of every actor, in actor order; None once the run stops (`watch` stops it
    where one actor's round takes env.stall_seconds)."""
    parts = []
    for k, q in enumerate(queues):
        item = get(q, stop, None if watch is None else watch.waiting(k))
        if item is None:
            return None
        parts.append(item)
    return parts


def round_record(parts: list[Trajectory], r: int, batch: int, runs: int | None = None) -> dict:
    """What a round tells the callbacks before the update: its tags, its episodes (the
    sums are what `runlog` aggregates; each run's [N] where `runs` seeds side by side
    hand in their actors' parts in turn), the actors' time in the env and the policy."""
    returns = np.concatenate([p.episode_returns for p in parts])
    groups = [parts] if runs is None else _by_run(parts, runs)
    sums = {
        "episodes": [sum(p.episode_returns.size for p in g) for g in groups],
        "episode_return_sum": [sum(float(p.episode_returns.sum()) for p in g) for g in groups],
        "episode_length_sum": [sum(float(p.episode_lengths.sum()) for p in g) for g in groups],
    }
    return {
        "round": r,
        "env_steps": (r + 1) * batch,
        "versions": [np.unique(p.traj.version).tolist() for p in parts],
        "episode_return": float(returns.mean()) if returns.size else math.nan,
        **{k: v[0] if runs is None else np.asarray(v, np.float64) for k, v in sums.items()},
        # the slowest actor's times (Trajectory's fields of the same names, less "actor_")
        **{k: max(getattr(p, k.removeprefix("actor_")) for p in parts) for k in ACTOR_TIMES},
    }


def _by_run(parts: list, runs: int) -> list[list]:
    """Parts of `runs` seed-batched runs, each run's actors in turn, grouped by run."""
    per_run = len(parts) // runs
    return [parts[k * per_run : (k + 1) * per_run] for k in range(runs)]


def _joined(parts: list[Trajectory], runs: int | None) -> Transition:
    """A round's trajectories joined over envs into [T, B] (each run's, stacked [N, T, B]
    where `runs` seeds run side by side)."""

    def join(group):
        return jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *[p.traj for p in group])

    if runs is None:
        return join(parts)
    return jax.tree.map(lambda *xs: np.stack(xs), *[join(g) for g in _by_run(parts, runs)])


def _merged_stats(obs_stats: ObsStats | None, parts: list[Trajectory], runs: int | None):
    """The statistics with the round's moments merged in actor order (each run's its own
    actors' where runs run side by side; every process's actors, in process order, where
    several processes step the envs)."""
    if obs_stats is None:
        return None
    if processes() > 1:  # one run (`processes.check_processes`): every actor's, in order
        local = [p.obs_moments for p in parts if p.obs_moments is not None]
        for batch in gathered_moments(local):
            obs_stats = merge(obs_stats, batch)
        return obs_stats
    groups = [[p] for p in parts] if runs is None else list(zip(*_by_run(parts, runs)))
    for group in groups:  # in actor order, whatever order they arrived in
        moments = [p.obs_moments for p in group if p.obs_moments is not None]
        if len(moments) == len(group):
            obs_stats = merge(obs_stats, moments[0] if runs is None else stack(moments))
    return obs_stats


def learn_round(learner: Learner, progress: Progress, parts: list[Trajectory], r: int):
    """(progress, metrics): the agent's update on round r (all actors' trajectories
    joined over envs into [T, B]; seed-batched runs' each their own), skipped when older
    than `max_staleness`. The observation statistics merge the round's moments first: an
    off-policy learner normalises its sampled batches with them (`ReplayLearner.learn`).
    Metrics are floats, or each run's [N] for seed-batched runs."""
    runs = None if learner.seeds is None else len(learner.seeds)
    traj = _joined(parts, runs)
    staleness = progress.updates - int(traj.version.min())
    skip = 0 <= learner.max_staleness < staleness
    state, updates, replay, metrics = progress.state, progress.updates, progress.replay, {}
    key = fold(learner.key, r)
    obs_stats = _merged_stats(progress.obs_stats, parts, runs)
    if learner.replay is not None:  # off-policy (max_staleness is refused for these)
        # raw observations stored; the batches normalised with every round's statistics
        state, replay, metrics, learned = learner.replay.learn(
            state, replay, traj, r, key, obs_stats
        )
        updates += int(learned)
    elif not skip:
        learned = learner.learn(state, *_placed(learner, traj, key))
        state, metrics = learned.state, learned.metrics
        updates += 1
    returns = progress.episode_returns + [p.episode_returns for p in parts]
    value = float if runs is None else np.asarray
    metrics = {
        **{k: value(v) for k, v in jax.device_get(metrics).items()},
        "policy_lag": float(staleness),
        "skipped_updates": float(skip),
    }
    return Progress(state, updates, r + 1, returns, replay, obs_stats), metrics


def _placed(learner: Learner, traj: Transition, key: jax.Array) -> tuple[Any, jax.Array]:
    """(the round's batch, the key) where the learner's update takes them: put there from
    one process, or each process's part of the batch with several (`processes.py`)."""
    batch_at = learner.device if learner.batch_at is None else learner.batch_at
    if processes() > 1:
        return global_batch(traj, batch_at), replicated(key, learner.device)
    return jax.device_put(traj, batch_at), jax.device_put(key, learner.device)


def start_actors(
    agent: Agent,
    envs: Sequence[GymnasiumVecEnv],
    config: Config,
    exchange: Exchange,
    first_round: int,
    seeds: tuple[int, ...] | None = None,
) -> tuple[list[threading.Thread], list[queue.Queue], list[Doing]]:
    """One daemon thread per env from `first_round` on (an actor over it, or for an
    actor process the relay to it, `actor_process.relay`), each with its own queue of
    lag + 1 trajectories and where it is (`stall.Doing`); seed-batched runs' (`seeds`)
    in turn, each run's actors with its seed's keys and resets."""
    threads: list[threading.Thread] = []
    queues: list[queue.Queue] = []
    doing: list[Doing] = []
    process_first, _ = process_envs(config)  # this process's envs' global indices
    per_run = len(envs) if seeds is None else len(envs) // len(seeds)
    first_env = process_first
    for k, env in enumerate(envs):
        run = k // per_run
        seed = config.train.seed if seeds is None else seeds[run]
        first_env = process_first if k % per_run == 0 else first_env
        plan = ActorPlan(
            k,
            first_env,
            config.env.num_envs,
            config.num_updates,
            config.pipeline.rollout_len,
            seed,
            device=host_devices(config)[0],
            first_round=first_round,
            raw_obs=agent.data == "replay",
            seed_index=None if seeds is None else run,
        )
        q: queue.Queue = queue.Queue(maxsize=config.pipeline.lag + 1)
        target: Callable[..., None]
        args: tuple
        if isinstance(env, ActorProcess):  # the child acts and marks where; this relays
            doing.append(env.doing)
            target, args = relay, (env, plan, exchange, q)
        else:
            doing.append(Doing())
            groups = actor_groups(
                agent, actor_key(config, seed), plan, getattr(env, "parts", [env])
            )
            memory = agent.initial_memory(env.num_envs)
            target, args = run_actor, (groups, plan, exchange, q, memory, doing[-1])
        thread = threading.Thread(target=target, args=args, name=f"host-actor-{k}", daemon=True)
        threads.append(thread)
        queues.append(q)
        first_env += env.num_envs
    for thread in threads:
        thread.start()
    return threads, queues, doing


class Executor:
    """A host run's actors, started, and the learner's step over their rounds.

    `Executor(config, agent, envs, start)` starts one actor thread per env from
    `start.round` (envs reset fresh) with `start`'s parameters published (the runs of
    `seeds`, or train.num_seeds, side by side: `seeds.py`); each `step`
    consumes the next round of every actor, learns from it and publishes slot r + 1.
    `close` stops the threads and re-raises an actor's failure as its ActorError. The
    run loop (`training/host_engine.py`) and `run_executor` drive the same steps."""

    def __init__(
        self,
        config: Config,
        agent: Agent,
        envs: Sequence[GymnasiumVecEnv],
        start: Start | None = None,
        *,
        stop: threading.Event | None = None,
        warn: Callable[[str], None] | None = None,
        seeds: Sequence[int] | None = None,
    ):
        self.seeds = run_seeds(config, seeds)
        key = run_key(config, self.seeds)
        self.learner = make_learner(config, agent, envs[0].spec, key, self.seeds)
        self.start = _ready(start, config, agent, envs[0].spec, self.learner, key)
        self.stop = RunStop(stop)
        store = ParamStore(config.pipeline.lag, self.start.round)
        params = one_device(self.start.state.params)
        store.publish(self.start.round, params, self.start.updates, self.start.obs_stats)
        self.exchange = Exchange(store, self.stop)
        self.threads, self.queues, doing = start_actors(
            agent, envs, config, self.exchange, self.start.round, self.seeds
        )
        names = [env.name for env in envs]
        self.relayed = {k for k, env in enumerate(envs) if isinstance(env, ActorProcess)}
        self.watch = StallWatch(
            config.env.stall_seconds, names, doing, self.stop, warn or _on_stderr
        )
        self.times, self.batch = RoundTimes(), 0
        self.lags: list[float] = []
        self._closed = False

    def progress(self) -> Progress:
        """Where the run starts: the start's state, updates, round, replay and statistics."""
        s = self.start
        return Progress(s.state, s.updates, s.round, [], s.replay, s.obs_stats)

    def step(self, progress: Progress) -> tuple[Progress, dict] | None:
        """(progress, record) after the learner's update on round `progress.rounds`
        (the record: the round's tags, episodes, times and the update's metrics); None
        once the run stops before the round is whole (a stop asked, a failure, a stall)."""
        r, waited = progress.rounds, time.perf_counter()
        parts = self._agreed(next_round(self.queues, self.stop, self.watch))
        if parts is None:
            return None
        learning = time.perf_counter()
        runs = None if self.seeds is None else len(self.seeds)
        local = sum(p.traj.reward.size for p in parts) // (runs or 1)  # a run's
        self.batch = local * processes()
        record = round_record(parts, r, self.batch, runs)
        if processes() > 1:
            record = gathered_record(record)
        progress, metrics = learn_round(self.learner, progress, parts, r)
        params = one_device(progress.state.params)
        self.exchange.store.publish(r + 1, params, progress.updates, progress.obs_stats)
        jax.block_until_ready(progress.state)
        if self.lags:  # the first round, its compiles included, is compile_seconds
            learned = time.perf_counter() - learning
            cpu = sum(p.cpu_seconds for p in parts)  # the actor processes' (0: threads)
            self.times.add(learning - waited, learned, record, cpu)
        else:
            self.times.first_round_done()
        self.lags.append(metrics["policy_lag"])
        record = {**record, **metrics, "updates": progress.updates}
        return progress, record

    def _agreed(self, parts: list[Trajectory] | None) -> list[Trajectory] | None:
        """`parts`, unless this process or (with several) any process stopped before its
        round was whole: then None in every process at this round, a failure anywhere
        recorded as this process's (`close` raises it; `processes.agree`)."""
        if processes() == 1:
            return parts
        failed = self.stop.failure is not None
        agreed = agree(parts is None, failed)
        if agreed == "go":
            return parts
        if agreed == "failed" and not failed:
            self.stop.record(failed_elsewhere())
        self.stop.set()
        return None

    def stats(self) -> dict:
        """The rounds stepped so far: their count, times and measured policy lag."""
        lags = self.lags
        return {
            "rounds": len(lags),
            **self.times.stats(len(lags), self.batch, self.batch // processes()),
            "policy_lag": float(np.mean(lags)) if lags else math.nan,
            "policy_lag_max": float(np.max(lags)) if lags else math.nan,
        }

    def close(self) -> None:
        """Stop every actor (a stuck one is a daemon left behind), then raise the first
        actor failure, if any, as its one-line ActorError (once: closing again does
        nothing)."""
        if self._closed:
            return
        self._closed = True
        self.stop.set()
        for k, thread in enumerate(self.threads):
            if k not in self.stop.stuck or k in self.relayed:  # a relay is never stuck
                thread.join(JOIN_SECONDS)
        self.stop.raise_failure()


def final_return(episode_returns: list, window: int) -> float | None:
    """The mean raw return of the last `window` episodes that ended (None: none did)."""
    returns = np.concatenate(episode_returns) if episode_returns else np.zeros(0)
    return float(returns[-window:].mean()) if returns.size else None


def make_learner(
    config: Config, agent: Agent, spec, key: jax.Array, seeds: tuple[int, ...] | None = None
) -> Learner:
    """The learner of a run of `config` (`key`: the run's key; seed-batched runs' keys
    [N] with `seeds`, their learners vmapped) on its mesh (`placement.host_mesh`);
    off-policy, with the replay's learner step for envs of `spec` (on one device:
    `config.host_devices` refuses more)."""
    placed = mesh_learn(batched(agent.learn, seeds), host_mesh(config), seeds is not None)
    return Learner(
        placed.learn,
        fold(key, 2),
        config.pipeline.max_staleness,
        placed.state_at,
        config.num_updates,
        ReplayLearner(agent, config, spec, seeds) if agent.data == "replay" else None,
        placed.batch_at,
        seeds,
    )


def _on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def record_hook(callback: Callable[[dict], None]) -> Callable[[Progress, dict], None]:
    """A callback of records (as `train` takes) as a learner-loop hook."""
    return lambda progress, record: callback(record)


def _ready(start: Start | None, config: Config, agent: Agent, spec, learner: Learner, key) -> Start:
    """`start` (default: a fresh learner state, each seed-batched run's) on the learner's
    device, with a fresh replay and fresh observation statistics where the run needs
    them and has none."""
    seeds = learner.seeds
    if start is None:
        start = Start(jax.jit(batched(agent.init, seeds))(fold(key, 0)))
    # Committed to the learner's device, as learn's outputs are: else the second update
    # compiles learn again (committed and uncommitted inputs are distinct programs).
    if processes() > 1:  # each process's own copy, on the mesh that spans them all
        start = start._replace(state=replicated(start.state, learner.device))
    else:
        start = start._replace(state=jax.device_put(start.state, learner.device))
    if learner.replay is not None and start.replay is None:
        start = start._replace(replay=learner.replay.init())
    elif start.replay is not None and start.round > 0:
        start = start._replace(replay=resumed(start.replay))
    if config.env.normalize_obs and start.obs_stats is None:
        runs = None if seeds is None else len(seeds)
        start = start._replace(obs_stats=initial_stats(spec.obs_shape, runs))
    return start


def run_executor(
    config: Config,
    agent: Agent,
    envs: Sequence[GymnasiumVecEnv],
    *,
    hooks: Sequence[Callable[[Progress, dict], None]] = (),
    stop: threading.Event | None = None,
    start: Start | None = None,
    warn: Callable[[str], None] | None = None,
) -> dict:
    """Train `agent` on `envs` (one per actor thread, `make_actor_envs`) in memory, every
    round the Executor's step, with nothing written (a run with logs and checkpoints goes
    through `jaxrl_async.train`).

    After each update every hook(progress, record) runs in the learner's thread, in order
    (a callback of records through `record_hook`). Setting `stop` ends the run early with
    the result so far; an actor's failure raises an ActorError of one line, an actor that
    hands in no round for env.stall_seconds an ActorStalled (its thread, stuck, left
    behind). `start` continues a run (restored state, its updates and rounds; the envs
    restart from fresh seeded resets); by default a fresh one. `warn(line)` shows a
    warning (a stall at half its time; default: on stderr).
    """
    executor = Executor(config, agent, envs, start, stop=stop, warn=warn)
    progress = executor.progress()
    try:
        while progress.rounds < executor.learner.rounds:
            stepped = executor.step(progress)
            if stepped is None:
                break
            progress, record = stepped
            for hook in hooks:
                hook(progress, record)
    finally:
        executor.close()
    stats = {**executor.stats(), "env_steps": progress.rounds * executor.batch}
    return _result(config, len(envs), progress, stats)


def _result(config: Config, actor_threads: int, progress: Progress, stats: dict) -> dict:
    """What a run of the executor returns: its settings, the learner loop's stats and the
    final state (parameters, replay, observation statistics)."""
    return {
        "env": config.env.name,
        "agent": config.agent.name,
        "seed": config.train.seed,
        "actor_threads": actor_threads,
        "lag": config.pipeline.lag,
        **stats,
        "updates": progress.updates,
        "stopped_early": progress.rounds < config.num_updates,
        "final_return": final_return(progress.episode_returns, config.env.num_envs),
        "params": jax.device_get(progress.state.params),
        "state": progress.state,
        "replay": progress.replay,
        "obs_stats": progress.obs_stats,
    }


def train_host(
    config: Config,
    *,
    callbacks: Sequence[Callable[[dict], None]] = (),
    stop: threading.Event | None = None,
) -> dict:
    """Train `config` (a host env: `gymnasium:<id>`, `envpool:<task>`) in memory, with no
    run directory.

    The result: env steps, updates, SPS, the final return (the mean raw return of the
    last env.num_envs episodes), the measured policy lag and the final parameters. The
    CLI's runs, with logs and checkpoints, go through `trainer.train`
    (`training/host_engine.py`)."""
    host_cpu_dispatch()
    envs = make_actor_envs(config)
    try:
        agent = make_host_agent(config, envs[0].spec)
    except Exception:
        for env in envs:
            env.close()
        raise
    return run_executor(config, agent, envs, hooks=[*map(record_hook, callbacks)], stop=stop)
