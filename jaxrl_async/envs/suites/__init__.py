"""Env suites by prefix: `env.name=<suite>:<id>` builds `<id>` from that suite.

Each suite has one small adapter module here, imported only when a run names the suite
(importing a suite takes seconds), exposing

    ids() -> list[str]                       the ids the suite registers
    make(id, **kwargs) -> (env, env_params)  a gymnax-1.0-API env (the internal contract)

The internal contract every adapter meets (`envs.spec.check_env` checks it):
- `reset(key, params) -> (obs, state)`;
- `step(key, state, action, params) -> (obs, state, reward, terminated, truncated, info)`,
  auto-resetting with fresh randomness from `key` where an episode ends, with
  `info["final_observation"]` the last observation of the episode that ended (else the
  new one); `terminated` (no bootstrap) and `truncated` (time limit: bootstrap) apart;
- `observation_space(params)` / `action_space(params)`: gymnax spaces. Observations are
  an array (Box) or a dict of arrays (gymnax `spaces.Dict` of Boxes); a dict's
  "action_mask" entry, a bool vector over the discrete actions, marks the legal ones.

An adapter may also expose `direct(id, **kwargs) -> (reset, step)`, the suite's own API for
one env, which `jaxrl-async bench --env` compares with the adapter (its overhead).
`autoreset.reset_where` auto-resets computing the suite's reset only for the envs that ended.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import NamedTuple

from jaxrl_async.envs.gymnax_import import import_gymnax
from jaxrl_async.errors import ConfigError, UserError, first_line


class Suite(NamedTuple):
    module: str  # the suite's own top-level package, to test whether it is installed
    adapter: str  # our adapter module
    extra: str  # `pip install jaxrl_async[<extra>]`
    example: str  # an id, for messages


SUITES: dict[str, Suite] = {
    "brax": Suite("brax", "jaxrl_async.envs.suites.brax", "brax", "inverted_pendulum"),
    "jumanji": Suite("jumanji", "jaxrl_async.envs.suites.jumanji", "jumanji", "Snake-v1"),
    "craftax": Suite(
        "craftax", "jaxrl_async.envs.suites.craftax", "craftax", "Craftax-Classic-Symbolic-v1"
    ),
    "navix": Suite("navix", "jaxrl_async.envs.suites.navix", "navix", "Navix-Empty-5x5-v0"),
    "xminigrid": Suite(
        "xminigrid", "jaxrl_async.envs.suites.xminigrid", "xminigrid", "MiniGrid-Empty-8x8"
    ),
}


def installed(suite: str) -> bool:
    return importlib.util.find_spec(SUITES[suite].module) is not None


def adapter(suite: str):
    """The adapter module of `suite`; a one-line ConfigError when the suite is not installed."""
    if not installed(suite):
        raise ConfigError(
            f"env suite {suite!r} is not installed: "
            f"pip install 'jaxrl_async[{SUITES[suite].extra}]'"
        )
    import_gymnax()  # every adapter uses gymnax's spaces
    return importlib.import_module(SUITES[suite].adapter)


def make(name: str, **kwargs):
    """(env, params) for `<suite>:<id>`."""
    suite, _, env_id = name.partition(":")
    module = adapter(suite)
    if env_id not in module.ids():
        raise ConfigError(
            f"unknown {suite} env {env_id!r} (e.g. {suite}:{SUITES[suite].example};"
            f" `jaxrl-async envs {suite}` lists them)"
        )
    return module.make(env_id, **kwargs)


def check_resets(name: str, env, params) -> None:
    """Trace `env.reset` once: kwargs of the wrong kind fail here, in one line, rather than
    in the first compile."""
    import jax

    try:
        jax.eval_shape(env.reset, jax.random.key(0), params)
    except Exception as e:  # noqa: BLE001  (the suite's own failures, whatever they are)
        raise UserError(f"{name} does not reset: {type(e).__name__}: {first_line(e)}") from None
