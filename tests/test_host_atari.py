"""Atari through ale-py (`jaxrl_async/host/atari.py`) against ale-py's own loops, step by step.

The reference steps single `ALE/Breakout-v5` envs one at a time under Gymnasium's
`AtariPreprocessing` and `FrameStackObservation` (or ale-py's `AtariVectorEnv`, stepped
raw), seeded as the adapter seeds them, and applies by hand what the adapter adds: frames
channels last, the sign of each reward, a life lost (ALE's own count) as a termination.
The episodes it reports are whole games with their raw scores. Numpy only.
"""

from __future__ import annotations

import sys

import gymnasium
import numpy as np
import pytest

from jaxrl_async.errors import ConfigError
from jaxrl_async.host import make_gymnasium
from tests.helpers.host_steps import FIELDS, Expected, assert_matches, run_adapter

ale_py = pytest.importorskip("ale_py")
gymnasium.register_envs(ale_py)

GAME = "ALE/Breakout-v5"
NAME = f"gymnasium:{GAME}"
MODES = ["same_step", "next_step"]


def fixed_actions(steps, num_envs, seed=0, num_actions=4):
    rng = np.random.default_rng(seed)
    return rng.integers(0, num_actions, (steps, num_envs)).astype(np.int32)


def single_env(game, env_kwargs):
    env = gymnasium.make(game, frameskip=1, **env_kwargs)
    env = gymnasium.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84)
    return gymnasium.wrappers.FrameStackObservation(env, 4)


def reference(actions, seed, mode, clip=True, episodic=True, game=GAME, env_kwargs=None):
    """Single envs of Gymnasium's preprocessing: (first obs [B], rows [T][B] of HostStep)."""
    envs = [single_env(game, env_kwargs or {}) for _ in range(actions.shape[1])]
    first, tracks = [], [Expected((clip, episodic)) for _ in envs]
    for i, env in enumerate(envs):
        first.append(np.moveaxis(env.reset(seed=seed + i)[0], 0, -1))
        tracks[i].lives = env.unwrapped.ale.lives()
    pending, rows = [False] * len(envs), []
    for actions_t in actions:
        row = []
        for i, env in enumerate(envs):
            ale = env.unwrapped.ale
            if pending[i]:  # next-step: this step only resets the env
                obs, _ = env.reset()
                pending[i] = False
                row.append(tracks[i].row(obs, 0.0, False, False, obs, ale.lives(), valid=False))
                continue
            obs, reward, terminated, truncated, _ = env.step(int(actions_t[i]))
            final, game_over = obs, terminated or truncated
            lives = ale.lives()
            if game_over and mode == "same_step":
                obs, _ = env.reset()
                lives = ale.lives()
            pending[i] = game_over and mode == "next_step"
            row.append(tracks[i].row(obs, reward, terminated, truncated, final, lives))
        rows.append(row)
    for env in envs:
        env.close()
    return np.stack(first), rows


@pytest.mark.parametrize("mode", MODES)
def test_preprocessed_breakout_matches_single_envs_step_by_step(mode):
    """The default options (episodic lives, clipped rewards) over a few games."""
    actions = fixed_actions(400, 2)
    with make_gymnasium(NAME, 2, autoreset_mode=mode) as env:
        assert env.spec.obs_shape == (84, 84, 4) and env.spec.obs_dtype == np.uint8
        assert env.spec.discrete and env.spec.num_actions == 4
        got = run_adapter(env, 3, actions)
    assert_matches(got, reference(actions, 3, mode))
    step = got[1]
    assert step.obs.dtype == np.uint8 and step.obs.shape[1:] == (2, 84, 84, 4)
    assert step.episode_done.any()  # whole games ended, and lives were lost within them
    assert (step.terminated & ~step.episode_done).any()
    assert (step.valid.all()) == (mode == "same_step")


@pytest.mark.parametrize("mode", MODES)
def test_raw_game_scores_under_clipping_and_lives(mode):
    """Reported returns are each game's unclipped score from the env's own loop, whatever
    the agent is given; without the options the agent gets the raw game. Space Invaders
    pays 5 to 30 a hit; ALE's frame limit ends games early, as truncations."""
    game, env_kwargs = "ALE/SpaceInvaders-v5", {"max_num_frames_per_episode": 480}
    actions = fixed_actions(260, 2, seed=1, num_actions=6)
    name, kwargs = f"gymnasium:{game}", {"autoreset_mode": mode, **env_kwargs}
    with make_gymnasium(name, 2, **kwargs) as env:
        got = run_adapter(env, 5, actions)
    assert_matches(got, reference(actions, 5, mode, game=game, env_kwargs=env_kwargs))
    shaped = got[1]
    with make_gymnasium(name, 2, episodic_life=False, clip_rewards=False, **kwargs) as env:
        got = run_adapter(env, 5, actions)
    want = reference(actions, 5, mode, False, False, game=game, env_kwargs=env_kwargs)
    assert_matches(got, want)
    raw = got[1]
    assert raw.truncated.any() and (raw.reward > 1).any()
    for field in ("episode_return", "episode_length", "episode_done", "obs", "truncated"):
        np.testing.assert_array_equal(getattr(shaped, field), getattr(raw, field))
    np.testing.assert_array_equal(shaped.reward, np.sign(raw.reward))
    assert (raw.reward > 1).any()  # some rewards were clipped
    assert not (raw.terminated & ~raw.episode_done).any()
    for i in range(2):  # each game's score is the sum of its raw rewards
        ends = np.flatnonzero(raw.episode_done[:, i])
        starts = np.concatenate([[0], ends[:-1] + 1])
        sums = [raw.reward[s : e + 1, i].sum() for s, e in zip(starts, ends, strict=True)]
        np.testing.assert_array_equal(raw.episode_return[ends, i], sums)


@pytest.mark.parametrize("mode", MODES)
def test_ale_vector_env_matches_its_raw_loop(mode):
    """`vectorization_mode=vector_entry_point`: ale-py's AtariVectorEnv, stepped raw with
    the same settings; the adapter adds channels last, clipping and lives only."""
    actions = fixed_actions(300, 2, seed=2)
    kwargs = {"vectorization_mode": "vector_entry_point", "autoreset_mode": mode}
    with make_gymnasium(NAME, 2, **kwargs) as env:
        first, step = run_adapter(env, 4, actions)
    raw = gymnasium.make_vec(
        GAME,
        2,
        vectorization_mode="vector_entry_point",
        frameskip=4,
        episodic_life=False,
        reward_clipping=False,
        use_fire_reset=False,
        autoreset_mode=mode.replace("same_step", "SameStep").replace("next_step", "NextStep"),
    )
    obs, info = raw.reset(seed=4)
    np.testing.assert_array_equal(first, np.moveaxis(obs, 1, -1))
    tracks = [Expected((True, True)) for _ in range(2)]
    for i in range(2):
        tracks[i].lives = info["lives"][i]
    resetting = np.zeros(2, bool)
    for t, a in enumerate(actions):
        obs, reward, terminated, truncated, info = raw.step(a)
        finals = info.get("final_obs") if mode == "same_step" else None
        for i in range(2):
            ended = terminated[i] or truncated[i]
            final = finals[i] if finals is not None and ended else obs[i]
            valid = not resetting[i]
            want = tracks[i].row(
                obs[i], reward[i] * valid, terminated[i], truncated[i], final,
                info["lives"][i], valid=valid,
            )  # fmt: skip
            for name in FIELDS:
                np.testing.assert_array_equal(
                    getattr(step, name)[t, i], getattr(want, name), err_msg=f"{name} {t} {i}"
                )
        resetting = (terminated | truncated) if mode == "next_step" else resetting
    raw.close()
    assert step.episode_done.any() and (step.terminated & ~step.episode_done).any()


def test_options_set_the_shape():
    with make_gymnasium(NAME, 1, screen_size=42, frame_stack=2, noop_max=0) as env:
        assert env.spec.obs_shape == (42, 42, 2)
        obs = env.reset(0)
        step = env.step(np.zeros(1, np.int32))
    assert obs.shape == (1, 42, 42, 2) and step.obs.dtype == np.uint8


def test_atari_false_is_the_raw_game():
    with make_gymnasium(NAME, 1, atari=False) as env:
        assert env.spec.obs_shape == (210, 160, 3) and env.atari is None


def test_a_missing_ale_py_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ale_py", None)  # `import ale_py` raises ImportError
    with pytest.raises(ConfigError) as raised:
        make_gymnasium(NAME, 1)
    message = str(raised.value)
    assert "\n" not in message and "pip install 'jaxrl_async[atari]'" in message


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"frame_stack": 0}, "frame_stack of .* must be an int >= 1"),
        ({"noop_max": -1}, "noop_max of .* must be an int >= 0"),
        ({"screen_size": True}, "screen_size of .* must be an int"),
        ({"clip_rewards": "yes"}, "clip_rewards of .* must be true or false"),
        ({"atari": "no"}, "atari of .* must be true or false"),
        ({"atari": False, "frame_stack": 2}, "need atari=true"),
        ({"frameskip": 4}, "set by the Atari options"),
        ({"vectorization_mode": "vector_entry_point", "stack_num": 2}, "set by the Atari"),
        ({"no_such_kwarg": 1}, "rejected"),
    ],
)
def test_bad_kwargs_are_refused_in_one_line(kwargs, match):
    with pytest.raises(ConfigError, match=match) as raised:
        make_gymnasium(NAME, 1, **kwargs)
    assert "\n" not in str(raised.value)
