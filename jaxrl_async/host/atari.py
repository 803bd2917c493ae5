"""Atari through ale-py: `gymnasium:ALE/<game>-v5` with the standard DQN/PPO preprocessing.

An id starting with `ALE/` imports ale-py (the `atari` extra) and registers its envs with
Gymnasium; without it, one line naming `pip install 'jaxrl_async[atari]'`. Every env is
ALE's v5 game (sticky actions with `repeat_action_probability` 0.25, ALE's own) seen
through the usual preprocessing, set by these `env.kwargs` (the others go to ALE's env:
`full_action_space`, `repeat_action_probability`, `max_num_frames_per_episode`, ...):

- `atari` (true): false takes the raw game through the plain Gymnasium path (no kwarg
  below applies);
- `frame_skip` (4): each action repeated on that many frames, rewards summed, the last
  two frames max-pooled (ALE's own `frameskip` is set to 1 under it, so it is refused);
- `screen_size` (84): grayscale frames resized to that square;
- `noop_max` (30): a reset plays a random 1..`noop_max` no-op actions (0: none);
- `frame_stack` (4): the last that many frames, channels last: uint8 [84, 84, 4];
- `episodic_life` (true): a life lost ends the agent's episode (`terminated`, no
  bootstrap) but not the game, which plays on from where it was;
- `clip_rewards` (true): the agent's reward is the sign of the game's (-1, 0 or 1).

Reported episodes are whole games and their raw scores: `HostStep.episode_return`,
`episode_length` and `episode_done` count the game's own rewards until the game ends
(game over, or ALE's frame limit as a truncation), whatever the clipping and lives.

Two vectorisations, by `vectorization_mode`: `sync` (the default) or `async` steps
Gymnasium's `AtariPreprocessing` and `FrameStackObservation` over `gymnasium.make`'s env;
`vector_entry_point` is ale-py's own `AtariVectorEnv` (threads in C++, the same options;
its preprocessing is its own, close to Gymnasium's but not equal frame for frame). Both
reset in the mode asked for (same-step unless told otherwise). Lives and clipping are
applied by the adapter from the env's raw rewards and `info["lives"]`, the same for both.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from jaxrl_async.errors import ConfigError, EnvSpecError

ALE_PREFIX = "ALE/"
EXTRA = "pip install 'jaxrl_async[atari]'"
# The adapter's kwargs with their least values (ints) or none (bools).
_MINIMUM = {"frame_skip": 1, "screen_size": 1, "noop_max": 0, "frame_stack": 1}
# Settings of the vector env that the options above make: a kwarg of one of these names
# would clash with them.
_SET_HERE = {
    "sync": frozenset({"frameskip"}),
    "vector_entry_point": frozenset(
        {"frameskip", "stack_num", "img_height", "img_width", "grayscale", "noop_max"}
        | {"episodic_life", "reward_clipping", "use_fire_reset", "maxpool", "autoreset_mode"}
    ),
}


class AtariOptions(NamedTuple):
    """The preprocessing of an `ALE/` id (see the module docstring)."""

    frame_skip: int = 4
    screen_size: int = 84
    noop_max: int = 30
    frame_stack: int = 4
    episodic_life: bool = True
    clip_rewards: bool = True


def is_atari(env_id: str) -> bool:
    return env_id.startswith(ALE_PREFIX)


def register_ale(name: str) -> None:
    """Import ale-py and register its envs with Gymnasium, or one line naming the extra."""
    try:
        import ale_py
    except ImportError:
        raise ConfigError(f"env.name={name!r} needs ale-py: {EXTRA}") from None
    gymnasium.register_envs(ale_py)


def take_options(name: str, kwargs: dict[str, Any]) -> AtariOptions | None:
    """Remove the adapter's kwargs from `kwargs`: its options, or None where `atari` is
    false. Values of the wrong kind are one-line ConfigErrors."""
    atari = kwargs.pop("atari", True)
    values = {key: kwargs.pop(key) for key in AtariOptions._fields if key in kwargs}
    if not isinstance(atari, bool):
        raise ConfigError(f"env.kwargs.atari of {name} must be true or false, got {atari!r}")
    if not atari:
        if values:
            raise ConfigError(f"env.kwargs {sorted(values)} of {name} need atari=true")
        return None
    for key, value in values.items():
        least = _MINIMUM.get(key)
        if least is None and not isinstance(value, bool):
            raise ConfigError(f"env.kwargs.{key} of {name} must be true or false, got {value!r}")
        if least is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < least
        ):
            raise ConfigError(
                f"env.kwargs.{key} of {name} must be an int >= {least}, got {value!r}"
            )
    return AtariOptions(**values)


def vec_arguments(
    name: str, options: AtariOptions, chosen: str, wanted: AutoresetMode | None, kwargs: dict
) -> dict[str, Any]:
    """The `gymnasium.make_vec` arguments (besides id and num_envs) of an `ALE/` id."""
    clash = sorted(_SET_HERE.get(chosen, _SET_HERE["sync"]) & set(kwargs))
    if clash:
        raise ConfigError(
            f"env.kwargs {clash} of {name} are set by the Atari options "
            "(frame_skip, screen_size, noop_max, frame_stack, episodic_life, clip_rewards)"
        )
    mode = wanted or AutoresetMode.SAME_STEP
    if chosen == "vector_entry_point":
        own = {
            "frameskip": options.frame_skip,
            "stack_num": options.frame_stack,
            "img_height": options.screen_size,
            "img_width": options.screen_size,
            "noop_max": options.noop_max,
            "grayscale": True,
            "maxpool": True,
            # Lives and clipping are the adapter's, from raw rewards; no FIRE at reset,
            # as in Gymnasium's preprocessing.
            "episodic_life": False,
            "reward_clipping": False,
            "use_fire_reset": False,
            "autoreset_mode": mode,
        }
        return {"vectorization_mode": chosen, **kwargs, **own}
    wrappers = [
        functools.partial(
            gymnasium.wrappers.AtariPreprocessing,
            noop_max=options.noop_max,
            frame_skip=options.frame_skip,
            screen_size=options.screen_size,
            terminal_on_life_loss=False,
            grayscale_obs=True,
        ),
        functools.partial(gymnasium.wrappers.FrameStackObservation, stack_size=options.frame_stack),
    ]
    return {
        "vectorization_mode": chosen,
        "vector_kwargs": {"autoreset_mode": mode},
        "wrappers": wrappers,
        **kwargs,
        "frameskip": 1,
    }


def channels_last(name: str, space: spaces.Space) -> spaces.Box:
    """The stacked frames' space [stack, H, W] as the networks see it: [H, W, stack]."""
    if not isinstance(space, spaces.Box) or len(space.shape) != 3:
        raise EnvSpecError(f"env {name}: stacked frames expected, got {space}")
    low = np.moveaxis(np.asarray(space.low), 0, -1)
    high = np.moveaxis(np.asarray(space.high), 0, -1)
    dtype: Any = np.dtype(space.dtype).type
    return spaces.Box(low, high, dtype=dtype)


class AtariLayer:
    """What the adapter puts between an Atari vector env and the agent: stacked frames
    channels last, clipped rewards and episodic lives. Episodes it reports stay the game's."""

    def __init__(self, num_envs: int, options: AtariOptions):
        self.options = options
        self._lives = np.zeros(num_envs, np.int64)

    def observe(self, raw_obs: np.ndarray) -> np.ndarray:
        """A batch [B, stack, H, W] -> [B, H, W, stack]."""
        return np.moveaxis(np.asarray(raw_obs), 1, -1)

    def reset(self, info: dict) -> None:
        self._lives = _lives(info, self._lives)

    def step(
        self,
        raw_reward: np.ndarray,
        terminated: np.ndarray,
        game_ended: np.ndarray,
        valid: np.ndarray,
        info: dict,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(the agent's reward, its `terminated`) of a step whose game ended where
        `game_ended`: a life lost (fewer lives than after the last step, the game playing
        on) terminates where `episodic_life`. `info["lives"]` is read after the step: the
        reset's where an env reset within it, so the count starts again there."""
        lives = _lives(info, self._lives)
        lost = valid & ~game_ended & (lives < self._lives)
        self._lives = lives
        if self.options.episodic_life:
            terminated = terminated | lost
        reward = np.sign(raw_reward) if self.options.clip_rewards else raw_reward
        return reward, terminated


def _lives(info: dict, before: np.ndarray) -> np.ndarray:
    """The lives of every env in `info` (ALE reports them on every step and reset)."""
    lives = info.get("lives")
    if lives is None:
        return before
    return np.asarray(lives, np.int64)
