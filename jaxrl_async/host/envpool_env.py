"""EnvPool's tasks by name, stepped on the host: `envpool:<task>` (the `envpool` extra).

`make_envpool(name, num_envs, **kwargs)` makes `envpool.make(task, env_type="gymnasium",
num_envs=num_envs, seed=..., **kwargs)` (`kwargs` are the config's `env.kwargs`, EnvPool's
options) and hands it to the Gymnasium adapter's `GymnasiumVecEnv` through `EnvPoolVec`,
a shim that presents the pool as the Gymnasium vector env that adapter wraps: the episode
semantics, the spaces (`map_spaces`) and Atari's layer are the Gymnasium adapter's,
unchanged.

- Seeds. EnvPool seeds env i from seed + i when the pool is made, and ignores
  `reset(seed=)`: a seeded reset makes the pool again with that seed (unless it was just
  made with it and never stepped), so `reset(seed)` gives the same episodes whatever ran
  before.
- Autoreset. EnvPool resets next-step: the step after an episode ended returns the reset
  observation, pays 0 and ignores the action. `autoreset_mode="next_step"` keeps that
  (the adapter marks that step not `valid`); "same_step", the default and what the
  executor takes, resets within the step: the envs whose episode ended are stepped alone
  once more (EnvPool's `step(actions, env_id)`), which only resets them; their last
  observation goes to `info["final_obs"]` and the reset's info (lives, elapsed_step)
  replaces the step's, as in Gymnasium's same-step vector envs. Each env then follows
  EnvPool's own loop with the reset steps left out.
- Atari tasks (`envpool:Breakout-v5`) take the Gymnasium adapter's options (`atari.py`:
  frame_skip, screen_size, noop_max, frame_stack, episodic_life, clip_rewards; `atari:
  false` for EnvPool's env as it comes, every kwarg its own), set as EnvPool's
  (`frame_skip`, `img_height`/`img_width`, `noop_max`, `stack_num`, grayscale) with its
  lives, clipping and FIRE at reset off: the adapter applies lives and clipping from the
  raw rewards and `info["lives"]`, so reported returns are whole games' raw scores.
  Sticky actions (`repeat_action_probability`) are ALE v5's 0.25 unless a kwarg says
  otherwise (EnvPool's own default is 0).
"""

from __future__ import annotations

import difflib
import warnings
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from jaxrl_async.errors import ConfigError, building_env
from jaxrl_async.host.atari import AtariOptions, take_options
from jaxrl_async.host.gymnasium_env import GymnasiumVecEnv, adapt, autoreset_mode_of

PREFIX = "envpool"
EXTRA = "pip install 'jaxrl_async[envpool]'"
# envpool.make's arguments that the adapter sets: seeds from reset(seed), one pool of
# num_envs stepped synchronously (a batch_size would make it asynchronous).
_RESERVED = frozenset({"task_id", "env_type", "num_envs", "seed", "env_seed", "batch_size"})
# EnvPool's Atari options that the adapter's options set.
_ATARI_SET_HERE = frozenset(
    {"stack_num", "img_height", "img_width", "gray_scale", "reward_clip", "use_fire_reset"}
    | {"zero_discount_on_life_loss"}
)
_ATARI_OPTIONS = "frame_skip, screen_size, noop_max, frame_stack, episodic_life, clip_rewards"
STICKY = 0.25  # ALE v5's repeat_action_probability


def parse_task(name: str) -> str:
    """EnvPool's task id of `envpool:<task>`."""
    prefix, _, task = name.partition(":")
    if prefix != PREFIX or not task:
        raise ConfigError(f"env.name={name!r}: expected {PREFIX}:<task> (envpool:CartPole-v1)")
    return task


def import_envpool(name: str) -> Any:
    """The envpool module, or a one-line ConfigError naming the extra."""
    try:
        import envpool
    except ImportError:
        raise ConfigError(f"env.name={name!r} needs envpool: {EXTRA}") from None
    return envpool


def envpool_tasks() -> list[str]:
    """EnvPool's task ids, sorted (envpool must be installed)."""
    import envpool

    return sorted(envpool.list_all_envs())


def _check_task(envpool: Any, name: str, task: str) -> None:
    tasks = envpool.list_all_envs()
    if task in tasks:
        return
    close = difflib.get_close_matches(task, tasks, n=1)
    hint = f"did you mean {PREFIX}:{close[0]}?" if close else "jaxrl-async envs envpool lists them"
    raise ConfigError(f"env.name={name!r}: EnvPool has no task {task!r} ({hint})")


def is_atari_task(task: str) -> bool:
    """Whether EnvPool's `task` is one of its Atari games (registered from envpool.atari)."""
    from envpool.registration import registry

    return registry.specs[task][0] == "envpool.atari"


def _atari_options(name: str, kwargs: dict[str, Any]) -> AtariOptions | None:
    """The adapter's options of an Atari task, taken out of `kwargs` (None: `atari:
    false`, EnvPool's env as it comes, every kwarg its own)."""
    if kwargs.get("atari", True) is False:
        kwargs.pop("atari")
        options, noop_max = None, kwargs.get("noop_max", 1)
    else:
        options = take_options(name, kwargs)
        noop_max = options.noop_max if options is not None else 1
    if isinstance(noop_max, int) and noop_max < 1:  # EnvPool would crash on 0
        raise ConfigError(
            f"env.kwargs.noop_max of {name} must be >= 1, got {noop_max} "
            "(EnvPool plays 1 to noop_max no-ops at every reset)"
        )
    return options


def atari_kwargs(name: str, options: AtariOptions, kwargs: dict[str, Any]) -> dict[str, Any]:
    """EnvPool's options for the adapter's Atari `options`, with the user's other kwargs."""
    clash = sorted(_ATARI_SET_HERE & set(kwargs))
    if clash:
        raise ConfigError(
            f"env.kwargs {clash} of {name} are set by the Atari options ({_ATARI_OPTIONS})"
        )
    own = {
        "frame_skip": options.frame_skip,
        "img_height": options.screen_size,
        "img_width": options.screen_size,
        "noop_max": options.noop_max,
        "stack_num": options.frame_stack,
        "gray_scale": True,
        # Lives and clipping are the adapter's, from raw rewards; no FIRE at reset, as in
        # Gymnasium's preprocessing.
        "episodic_life": False,
        "reward_clip": False,
        "zero_discount_on_life_loss": False,
        "use_fire_reset": False,
    }
    return {"repeat_action_probability": STICKY, **kwargs, **own}


def make_envpool(
    name: str,
    num_envs: int,
    *,
    autoreset_mode: AutoresetMode | str | None = None,
    **kwargs: Any,
) -> GymnasiumVecEnv:
    """`num_envs` envs of EnvPool's task `name` (`envpool:<task>`) with its options `kwargs`.

    autoreset_mode: "same_step" (None: the default) or "next_step", EnvPool's own.

    A missing envpool, an unknown task, rejected kwargs and spaces that cannot be mapped
    are one-line ConfigErrors (EnvSpecError for a space).
    """
    if num_envs < 1:
        raise ConfigError(f"num_envs must be >= 1, got {num_envs}")
    mode = autoreset_mode_of(autoreset_mode or AutoresetMode.SAME_STEP)
    task = parse_task(name)
    envpool = import_envpool(name)
    _check_task(envpool, name, task)
    reserved = sorted(_RESERVED & set(kwargs))
    if reserved:
        raise ConfigError(
            f"env.kwargs {reserved} of {name} are the adapter's own "
            "(env.num_envs, seeds from train.seed, one synchronous pool)"
        )
    options = _atari_options(name, kwargs) if is_atari_task(task) else None
    made = kwargs if options is None else atari_kwargs(name, options, kwargs)
    with building_env(repr(name), kwargs):
        vec = EnvPoolVec(envpool, task, num_envs, made, mode)
    return adapt(name, vec, mode, options)


def _put(batch: Any, ids: np.ndarray, part: Any) -> Any:
    """A copy of `batch` (an array or a dict of arrays [B, ...]) with rows `ids` from `part`."""
    if isinstance(batch, dict):
        return {k: _put(v, ids, part[k]) for k, v in batch.items()}
    out = np.array(batch)
    out[ids] = part
    return out


def _merge_info(info: dict, ids: np.ndarray, part: dict, num_envs: int) -> dict:
    """`info` with the entries of envs `ids` from `part` (another step's info of those
    envs); entries that are not per env (no leading axis of num_envs) stay."""
    out = dict(info)
    for key, value in info.items():
        if key not in part:
            continue
        if isinstance(value, dict):
            out[key] = _merge_info(value, ids, part[key], num_envs)
        elif isinstance(value, np.ndarray) and value.ndim and len(value) == num_envs:
            out[key] = _put(value, ids, part[key])
    return out


def _made(pool: Any) -> Any:
    """A pool with its spaces made (EnvPool makes them on first use, its first step's
    included), without Gymnasium's warnings on float64 bounds of a float32 Box."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        pool.observation_space  # noqa: B018  (made and kept by the property)
        pool.action_space  # noqa: B018
    return pool


class EnvPoolVec(VectorEnv):
    """An EnvPool as the Gymnasium vector env `GymnasiumVecEnv` wraps: single and batched
    spaces, `metadata["autoreset_mode"]`, `reset(seed=)` that seeds (by making the pool
    again), `step` in the chosen autoreset mode, `render` of every env."""

    def __init__(self, envpool: Any, task: str, num_envs: int, kwargs: dict, mode):
        self._make = lambda seed: _made(
            envpool.make(task, env_type="gymnasium", num_envs=num_envs, seed=seed, **kwargs)
        )
        self.pool = self._make(0)
        self._fresh_seed: int | None = 0  # the seed of a pool made and never stepped
        self.num_envs = num_envs
        self.single_observation_space = self.pool.observation_space
        self.single_action_space = self.pool.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.metadata = {**self.pool.metadata, "autoreset_mode": mode}
        self.autoreset_mode = mode

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Reset every env: env i from `seed` + i (a fresh pool), else as EnvPool goes on."""
        if seed is not None and seed != self._fresh_seed:
            self.pool.close()
            self.pool = self._make(seed)
        self._fresh_seed = None
        return self.pool.reset(options=options)

    def step(self, actions):
        self._fresh_seed = None
        obs, reward, terminated, truncated, info = self.pool.step(actions)
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            return obs, reward, terminated, truncated, info
        ended = np.asarray(terminated, bool) | np.asarray(truncated, bool)
        if ended.any():  # reset them now: EnvPool's next step of those envs, alone
            ids = np.flatnonzero(ended).astype(np.int32)
            reset_obs, *_, reset_info = self.pool.step(np.asarray(actions)[ids], env_id=ids)
            info = _merge_info(info, ids, reset_info, self.num_envs)
            info["final_obs"], info["_final_obs"] = obs, ended
            obs = _put(obs, ids, reset_obs)
        return obs, reward, terminated, truncated, info

    def render(self):
        """Every env's frame [B, H, W, 3] (the pool made with render_mode="rgb_array")."""
        return self.pool.render(env_ids=np.arange(self.num_envs, dtype=np.int32))

    def close_extras(self, **kwargs: Any) -> None:
        self.pool.close()
