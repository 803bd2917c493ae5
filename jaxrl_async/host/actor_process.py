"""An actor in a process of its own (`pipeline.actor_processes`): its envs and its
policy off the interpreter the learner runs on.

An actor thread shares the run's Python interpreter with the learner: while the learner
dispatches its update, builds its batch and logs, the actor's env steps (Gymnasium's and
MuJoCo's hold the interpreter's lock) and policy calls wait their turn, and a second
actor thread only adds to the queue (`docs/environments.md`). In its own process an actor
steps and acts at the speed it has alone, and the learner keeps its own interpreter:
Sample Factory's and cleanba's rollout workers.

`ActorProcess(config, size)` starts the child, which builds the actor's `size` envs
(`actor_build.actor_env`: the envs, env groups and masks a thread would have) and answers
their name, spec and count: in the run's process it stands where the actor's env would.
`relay` is the run's actor thread for it: it sends the child the plan (`ActorPlan`)
and hands each trajectory the child returns to the learner's queue, while a thread of
its own sends each round's parameters the moment the learner publishes their slot
(`params.ParamStore`). The child runs
`actor.run_actor` itself, over a ParamStore of its own that the run's parameters fill,
so a round is acted exactly as a thread acts it: the same envs, resets, keys and
parameter versions, and with JAX on the CPU on both sides, the same actions bit for bit.
The child's JAX runs on the CPU (a run's policy on an accelerator stays in an actor
thread) and computes inline, as a host run's actor threads do (`_xla_flags.py`). Where
the child's actor is (reset, policy, step) is one byte both processes map
(`stall.SharedDoing`), so the stall watch names where a stuck child is.

The child is a fresh interpreter running `serve` (`python -c`: not a fork of a process
whose JAX threads hold locks, and no re-import of the user's main module, as
multiprocessing's spawn would do), with the run's `sys.path` and, for a `gymnasium:<id>`
the run's process registered, that registration. It ignores Ctrl-C: the run's process
stops the run and ends its children. It ends when the run closes its pipe, however the
run's process ends; one stuck in an env's step is killed. Errors come back as what a
thread would have raised: one building the envs as its exception (a ConfigError stays
one), one in a round as the run's ActorError line.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import gymnasium
import jax

from jaxrl_async.errors import ConfigError, first_line
from jaxrl_async.host.atari import is_atari
from jaxrl_async.host.gymnasium_env import FACTORY_NAMESPACE, parse_name
from jaxrl_async.host.stall import SharedDoing
from jaxrl_async.host.stopping import POLL, RunStop, put

# How long `close` waits for the child to end before it is killed.
CLOSE_SECONDS = 5.0


class ActorProcess:
    """The child process of one actor, seen from the run as the actor's env: its `name`,
    `spec` and `num_envs`, and `close`."""

    def __init__(self, config, size: int):
        _check_importable(config.env.name)
        ours, theirs = socket.socketpair()
        entry = f"from {__name__} import serve; serve({theirs.fileno()})"
        command = [sys.executable, "-c", entry]
        environment = {**os.environ, "JAX_PLATFORMS": "cpu"}
        self._process = subprocess.Popen(command, pass_fds=[theirs.fileno()], env=environment)
        theirs.close()
        self.conn = Connection(ours.detach())
        self.doing = SharedDoing()  # where the child's actor is, for the stall watch
        try:
            registered = _registered(config.env.name)
            self.conn.send((list(sys.path), config, size, registered, self.doing.path))
            self.name, self.spec, self.num_envs = self.reply()
        except BaseException:
            self.close()
            raise
        finally:
            self.doing.unlink()  # mapped on both sides by now, or never to be

    def reply(self, stop: RunStop | None = None) -> Any:
        """The child's next message; None once `stop` is set first (polled)."""
        while stop is not None and not self.conn.poll(POLL):
            if stop.is_set():
                return None
        try:
            kind, value = self.conn.recv()
        except (EOFError, OSError):
            code = self._process.poll()
            raise RuntimeError(f"the actor process ended (exit code {code})") from None
        if kind == "error":
            raise value
        return value

    def send(self, message: Any) -> None:
        self.conn.send(message)

    def close(self, stuck: bool = False) -> None:
        """End the child: its pipe closed, which stops its actor (a send of its blocked
        on the pipe fails at once), then killed where it does not end in time, or at once
        where it is `stuck` (its env's step never returned: the stall watch said so).
        Safe to call again."""
        self.conn.close()
        try:
            self._process.wait(0 if stuck else CLOSE_SECONDS)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def relay(child: ActorProcess, plan, exchange, out) -> None:
    """The run's thread for an actor in `child`: the plan, then the child's trajectories
    into `out` (each round's parameters go to the child as the learner publishes them,
    `_push`), until the plan's last round, a stop or a failure (the child's, recorded as
    the run's). The child is ended however the thread ends; the thread itself never
    blocks for longer than a poll, so the run joins it even where its child is stuck."""
    stop = exchange.stop
    try:
        child.send(plan._replace(device=None))
        name = f"host-actor-{plan.actor}-params"
        pusher = threading.Thread(target=_push, args=(child, plan, exchange), name=name)
        pusher.daemon = True
        pusher.start()
        for _ in range(plan.first_round, plan.rounds):
            handed = child.reply(stop)
            if handed is None:
                return
            if isinstance(handed, BaseException):  # the child's actor failed: its line
                stop.record(handed)
                return
            if not put(out, handed, stop):
                return
    except Exception as e:  # noqa: BLE001  (the child gone, a pipe broken: one line)
        if not stop.is_set():  # else the run ends anyway, and closed the pipe itself
            stop.fail(child.name, plan.actor, e)
    finally:
        child.close(stuck=plan.actor in stop.stuck)


def _push(child: ActorProcess, plan, exchange) -> None:
    """Every parameter slot the child's rounds act with, sent as soon as the learner
    publishes it: at lag >= 1 the next round's are in the child before its round ends,
    so it goes on without waiting for the run to take its trajectory first."""
    store, stop = exchange
    slots = sorted({store.slot_of(i) for i in range(plan.first_round, plan.rounds)})
    try:
        for slot in slots:
            published = store.wait(slot, stop)
            if published is None:
                return
            child.send((slot, *jax.device_get(tuple(published))))
    except Exception as e:  # noqa: BLE001  (a pipe the relay closed, or broken: one line)
        if not stop.is_set():
            stop.fail(child.name, plan.actor, e)


class _Sender:
    """The child's side of `out`: each trajectory sent to the run as it is put, with the
    CPU seconds this process spent since the last (`Trajectory.cpu_seconds`: the run
    counts its own process's CPU, not its children's)."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.cpu = time.process_time()

    def put(self, item, timeout=None) -> None:
        now = time.process_time()
        self.conn.send(("ok", item._replace(cpu_seconds=now - self.cpu)))
        self.cpu = now


def _receive(conn: Connection, store, stop: RunStop) -> None:
    """The child's listener: each round's parameters into `store`, until the run closes
    the pipe (the run ends, or its process is gone): then the child's actor stops."""
    try:
        while True:
            store.publish(*conn.recv())
    except (EOFError, OSError):
        pass
    finally:
        stop.set()


def _actor(conn: Connection, config, env, doing: SharedDoing) -> None:
    """The child's actor: the plan it is sent, then `run_actor` over `env`'s groups (which
    closes them), each round's trajectory sent back; a failure sent back as the run's
    line."""
    from jaxrl_async._xla_flags import host_cpu_dispatch

    host_cpu_dispatch()
    from jaxrl_async.host.actor import Exchange, run_actor
    from jaxrl_async.host.actor_build import actor_groups, actor_key, host_agent
    from jaxrl_async.host.params import ParamStore

    try:
        plan = conn.recv()
        agent = host_agent(config, env.spec)
        parts = getattr(env, "parts", [env])
        groups = actor_groups(agent, actor_key(config, plan.seed), plan, parts)
        memory = agent.initial_memory(env.num_envs)
    except BaseException:
        env.close()
        raise
    store, stop = ParamStore(config.pipeline.lag, plan.first_round), RunStop()
    listener = threading.Thread(target=_receive, args=(conn, store, stop), daemon=True)
    listener.start()
    exchange = Exchange(store, stop)
    run_actor(groups, plan, exchange, _Sender(conn), memory, doing)  # type: ignore[arg-type]
    if stop.failure is not None:
        conn.send(("ok", stop.failure))
    listener.join()  # the pipe stays open until the run closes it


def _serve(conn: Connection) -> None:
    """The child: the run's sys.path, config and env count; the envs built and described;
    then the actor, until the run stops it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    env = None
    try:
        path, config, size, registered, doing = conn.recv()
        sys.path[:] = path  # the run's: a user's env module imports as it did there
        if registered is not None:
            _register(registered)
        from jaxrl_async.host.actor_build import actor_env

        env = actor_env(config, size)
        where = SharedDoing(doing)
        conn.send(("ok", (env.name, env.spec, env.num_envs)))
        built, env = env, None  # `_actor` closes it
        _actor(conn, config, built, where)
    except (EOFError, OSError):  # the run's process is gone: nothing to answer
        return
    except BaseException as e:  # noqa: BLE001  (building the envs: back to the run)
        _send_error(conn, e)
    finally:
        if env is not None:
            env.close()
        conn.close()


def _check_importable(name: str) -> None:
    """A one-line ConfigError for an env a child cannot build: a factory passed as env=
    that only this process knows (`gymnasium_env.factory_name`)."""
    if name.startswith(f"gymnasium:{FACTORY_NAMESPACE}/"):
        raise ConfigError(
            f"env.name={name!r}: pipeline.actor_processes builds the envs in other "
            "processes, which cannot import this factory (a lambda, a local function, one "
            "of __main__): define it at a module's top level, or set "
            "pipeline.actor_processes=false"
        )


def _registered(name: str) -> Any:
    """The Gymnasium EnvSpec the run's process registered for the id of `name`
    (`gymnasium:<id>`, registered by a module the user imported), where it can be sent;
    None for other names (a module in the name registers its ids in the child too; ale-py
    registers its own; a factory of this process only was refused, `_check_importable`)."""
    if name.partition(":")[0] != "gymnasium":
        return None
    module, env_id = parse_name(name)
    spec = gymnasium.envs.registration.registry.get(env_id)
    if module is not None or spec is None or is_atari(env_id):
        return None
    try:
        return pickle.loads(pickle.dumps(spec))
    except Exception:  # noqa: BLE001  (an entry point of __main__: the child says so)
        return None


def _register(spec) -> None:
    """Register the run's EnvSpec in the child, where its id is not known already."""
    if spec.id not in gymnasium.envs.registration.registry:
        gymnasium.envs.registration.registry[spec.id] = spec


def _send_error(conn: Connection, error: BaseException) -> None:
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # noqa: BLE001  (an exception that does not pickle back)
        error = RuntimeError(f"{type(error).__name__}: {first_line(error)}")
    with contextlib.suppress(OSError):  # the run's process is gone
        conn.send(("error", error))


def serve(fd: int) -> None:
    """The child's entry: the actor on the pipe of file descriptor `fd`."""
    _serve(Connection(fd))
