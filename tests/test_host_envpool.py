"""EnvPool host envs (`jaxrl_async/host/envpool_env.py`) against EnvPool's own loops, step
by step.

The reference steps each env i as a pool of one made with seed + i (EnvPool seeds env i of
a pool from seed + i; the first test checks that against a pool of B) in EnvPool's own
next-step loop: the step after an episode ended only resets the env. Under the adapter's
next-step mode that step is no transition (not `valid`, reward 0); under its same-step
mode the reset is taken at once and the last observation kept as the final one. Atari
adds, by hand, what the adapter's layer adds: frames channels last, the sign of each
reward, a life lost (EnvPool's `info["lives"]`) as a termination; the episodes reported
are whole games with their raw scores. Numpy only, but for one short training run.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

envpool = pytest.importorskip("envpool")

from jaxrl_async.config.sections import HOST_SUITES, EnvConfig  # noqa: E402
from jaxrl_async.errors import ConfigError, EnvSpecError  # noqa: E402
from jaxrl_async.host import make_envpool, make_host_env  # noqa: E402
from jaxrl_async.host.by_name import MAKERS  # noqa: E402
from tests.helpers.host_steps import (  # noqa: E402
    FIELDS,
    Expected,
    assert_matches,
    run_adapter,
)

MODES = ["same_step", "next_step"]
ATARI_OFF = {"episodic_life": False, "reward_clip": False, "use_fire_reset": False}


def own_pool(task, num_envs, seed, **kwargs):
    pool = envpool.make(task, env_type="gymnasium", num_envs=num_envs, seed=seed, **kwargs)
    with warnings.catch_warnings():  # Gymnasium's, on float64 bounds of a float32 Box
        warnings.simplefilter("ignore", UserWarning)
        pool.observation_space  # noqa: B018  (made on first use, by the first step)
    return pool


def reference(task, kwargs, seed, actions, mode, atari=None):
    """Pools of one env each in EnvPool's own loop: (first obs [B], rows [T][B] of HostStep)."""
    pools = [own_pool(task, 1, seed + i, **kwargs) for i in range(actions.shape[1])]
    first, tracks = [], []
    for pool in pools:
        obs, info = pool.reset()
        first.append(np.moveaxis(obs[0], 0, -1) if atari else obs[0])
        tracks.append(Expected(atari, info.get("lives", [None])[0]))
    pending, rows = [False] * len(pools), []
    for actions_t in actions:
        row = []
        for i, pool in enumerate(pools):
            obs, reward, terminated, truncated, info = pool.step(actions_t[i : i + 1])
            lives = info.get("lives", [None])[0]
            if pending[i]:  # next-step: EnvPool's step after an end only resets the env
                assert reward[0] == 0 and info["elapsed_step"][0] == 0
                pending[i] = False
                row.append(tracks[i].row(obs[0], 0.0, False, False, obs[0], lives, valid=False))
                continue
            final, done = obs[0], bool(terminated[0] or truncated[0])
            if done and mode == "same_step":  # the reset, taken at once
                obs, _, _, _, info = pool.step(actions_t[i : i + 1])
                lives = info.get("lives", [None])[0]
            pending[i] = done and mode == "next_step"
            step = (obs[0], float(reward[0]), terminated[0], truncated[0], final, lives)
            row.append(tracks[i].row(*step))
        rows.append(row)
    for pool in pools:
        pool.close()
    return np.stack(first), rows


def cartpole_actions(steps=80, envs=4):
    actions = np.random.default_rng(0).integers(0, 2, (steps, envs)).astype(np.int32)
    actions[:, 0] = 1  # always pushing right falls over before the time limit
    return actions


def test_pool_seeds_env_i_from_seed_plus_i():
    """What the reference relies on: env i of a pool made with `seed` is a pool of one
    made with seed + i, step for step."""
    actions = cartpole_actions(40, 3)
    pool = own_pool("CartPole-v1", 3, 7, max_episode_steps=12)
    singles = [own_pool("CartPole-v1", 1, 7 + i, max_episode_steps=12) for i in range(3)]
    obs = pool.reset()[0]
    np.testing.assert_array_equal(obs, np.concatenate([s.reset()[0] for s in singles]))
    for a in actions:
        out = pool.step(a)
        for i, single in enumerate(singles):
            one = single.step(a[i : i + 1])
            for k in range(4):
                np.testing.assert_array_equal(out[k][i], one[k][0])


@pytest.mark.parametrize("mode", MODES)
def test_cartpole_matches_envpools_own_loop_step_by_step(mode):
    """Random actions, a time limit of 12 (an EnvPool option) so that both kinds of end come."""
    actions = cartpole_actions()
    kwargs = {"max_episode_steps": 12}
    with make_envpool("envpool:CartPole-v1", 4, autoreset_mode=mode, **kwargs) as env:
        assert env.autoreset_mode.value == {"same_step": "SameStep", "next_step": "NextStep"}[mode]
        assert env.spec.obs_shape == (4,) and env.spec.discrete and env.spec.num_actions == 2
        got = run_adapter(env, 7, actions)
    assert_matches(got, reference("CartPole-v1", kwargs, 7, actions, mode))
    step = got[1]
    assert step.terminated.any() and step.truncated.any()  # both kinds of end were tested
    assert step.obs.dtype == np.float32 and step.reward.dtype == np.float32
    assert step.valid.all() == (mode == "same_step")
    assert np.all(step.episode_length[step.truncated] == 12)
    assert np.all(step.episode_return == step.episode_length)  # CartPole pays 1 a step
    ended = step.terminated | step.truncated
    if mode == "same_step":  # the reset observation follows at once, the last one kept
        assert not np.any(np.all(step.obs[ended] == step.final_obs[ended], axis=-1))
    else:
        np.testing.assert_array_equal(step.obs, step.final_obs)


def test_next_step_mode_is_a_pool_of_b_stepped_raw():
    """Next-step: the adapter's outputs are a pool of B's own, with the step after an end
    marked not valid (it pays 0 and ignores the action)."""
    actions = cartpole_actions(60, 3)
    with make_envpool(
        "envpool:CartPole-v1", 3, autoreset_mode="next_step", max_episode_steps=12
    ) as env:
        first, step = run_adapter(env, 3, actions)
    raw = own_pool("CartPole-v1", 3, 3, max_episode_steps=12)
    np.testing.assert_array_equal(first, raw.reset()[0])
    ended = np.zeros(3, bool)
    for t, a in enumerate(actions):
        obs, reward, terminated, truncated, _ = raw.step(a)
        np.testing.assert_array_equal(step.obs[t], obs)
        np.testing.assert_array_equal(step.valid[t], ~ended)
        np.testing.assert_array_equal(step.reward[t], reward)
        np.testing.assert_array_equal(step.terminated[t], terminated)
        np.testing.assert_array_equal(step.truncated[t], truncated)
        ended = terminated | truncated
    raw.close()
    assert not step.valid.all()


@pytest.mark.parametrize("mode", MODES)
def test_halfcheetah_truncates_and_keeps_the_final_obs(mode):
    """MuJoCo: float64 observations and actions as float32; every episode truncated at
    the time limit, bootstrapped from the last observation (`final_obs`)."""
    actions = np.random.default_rng(2).uniform(-1, 1, (60, 2, 6)).astype(np.float32)
    kwargs = {"max_episode_steps": 25}
    with make_envpool("envpool:HalfCheetah-v5", 2, autoreset_mode=mode, **kwargs) as env:
        assert env.spec.obs_shape == (17,) and env.spec.obs_dtype == np.float32
        assert env.spec.action_shape == (6,) and env.spec.action_dtype == np.float32
        got = run_adapter(env, 5, actions)
    want = reference("HalfCheetah-v5", kwargs, 5, actions.astype(np.float64), mode)
    assert_matches(got, want)
    step = got[1]
    assert not step.terminated.any()
    valid_t = np.cumsum(step.valid, axis=0)  # each env's valid steps so far
    np.testing.assert_array_equal(step.truncated, step.valid & (valid_t % 25 == 0))
    assert np.all(step.episode_length[step.truncated] == 25)
    if mode == "same_step":
        assert step.truncated.sum() == 4  # steps 25 and 50 of both envs
        cut = step.truncated
        assert not np.any(np.all(step.final_obs[cut] == step.obs[cut], axis=-1))


def test_same_seed_same_episodes_whatever_ran_before():
    """reset(seed) makes the pool again: a seed repeats its episodes on the same adapter
    after other steps, and on a fresh one; another seed does not."""
    actions = cartpole_actions(30, 2)
    with make_envpool("envpool:CartPole-v1", 2, max_episode_steps=12) as env:
        first = run_adapter(env, 11, actions)
        again = run_adapter(env, 11, actions)
        other = run_adapter(env, 12, actions)
    with make_envpool("envpool:CartPole-v1", 2, max_episode_steps=12) as env:
        fresh = run_adapter(env, 11, actions)
    for run in (again, fresh):
        np.testing.assert_array_equal(run[0], first[0])
        for name in FIELDS:
            np.testing.assert_array_equal(getattr(run[1], name), getattr(first[1], name))
    assert not np.array_equal(other[0], first[0])


def breakout_actions(steps, envs, seed=0, num_actions=4):
    rng = np.random.default_rng(seed)
    return rng.integers(0, num_actions, (steps, envs)).astype(np.int32)


@pytest.mark.parametrize("mode", MODES)
def test_breakout_with_atari_options_matches_envpools_own_loop(mode):
    """The default options (episodic lives, clipped rewards) over whole games, frames
    channels last; EnvPool's own lives and clipping off, sticky actions at ALE's 0.25."""
    actions = breakout_actions(400, 2)
    with make_envpool("envpool:Breakout-v5", 2, autoreset_mode=mode) as env:
        assert env.spec.obs_shape == (84, 84, 4) and env.spec.obs_dtype == np.uint8
        assert env.spec.discrete and env.spec.num_actions == 4
        config = env.env.pool.config
        got = run_adapter(env, 3, actions)
    assert config["repeat_action_probability"] == 0.25 and config["stack_num"] == 4
    assert not (config["episodic_life"] or config["reward_clip"] or config["use_fire_reset"])
    kwargs = {**ATARI_OFF, "repeat_action_probability": 0.25}
    assert_matches(got, reference("Breakout-v5", kwargs, 3, actions, mode, atari=(True, True)))
    step = got[1]
    assert step.obs.shape[1:] == (2, 84, 84, 4) and step.obs.dtype == np.uint8
    assert step.episode_done.any()  # whole games ended, and lives were lost within them
    assert (step.terminated & ~step.episode_done).any()
    assert step.valid.all() == (mode == "same_step")


@pytest.mark.parametrize(
    "game,limit,num_actions", [("Breakout-v5", 150, 4), ("SpaceInvaders-v5", 250, 6)]
)
def test_raw_game_scores_under_clipping_and_lives(game, limit, num_actions):
    """Reported returns are each game's unclipped score, whatever the agent is given:
    the sums of the raw rewards per game. Space Invaders pays 5 to 30 a hit (clipped to
    1); a time limit (`max_episode_steps`) ends games early, as truncations."""
    actions = breakout_actions(400, 2, seed=1, num_actions=num_actions)
    name, kwargs = f"envpool:{game}", {"max_episode_steps": limit}
    with make_envpool(name, 2, **kwargs) as env:
        shaped = run_adapter(env, 5, actions)[1]
    with make_envpool(name, 2, episodic_life=False, clip_rewards=False, **kwargs) as env:
        raw = run_adapter(env, 5, actions)[1]
    assert raw.truncated.any() and raw.episode_done.any()
    for field in ("episode_return", "episode_length", "episode_done", "obs", "truncated"):
        np.testing.assert_array_equal(getattr(shaped, field), getattr(raw, field))
    np.testing.assert_array_equal(shaped.reward, np.sign(raw.reward))
    assert (shaped.terminated & ~shaped.episode_done).any()  # lives lost mid-game
    assert not (raw.terminated & ~raw.episode_done).any()
    if "Space" in game:
        assert (raw.reward > 1).any()  # some rewards were clipped
    for i in range(2):  # each game's score is the sum of its raw rewards
        ends = np.flatnonzero(raw.episode_done[:, i])
        starts = np.concatenate([[0], ends[:-1] + 1])
        sums = [raw.reward[s : e + 1, i].sum() for s, e in zip(starts, ends, strict=True)]
        np.testing.assert_array_equal(raw.episode_return[ends, i], sums)


def test_atari_options_map_onto_envpools():
    with make_envpool(
        "envpool:Breakout-v5", 1, screen_size=42, frame_stack=2, noop_max=1, frame_skip=3
    ) as env:
        assert env.spec.obs_shape == (42, 42, 2)
        config = env.env.pool.config
        obs = env.reset(0)
        step = env.step(np.zeros(1, np.int32))
    assert (config["img_height"], config["img_width"], config["stack_num"]) == (42, 42, 2)
    assert (config["noop_max"], config["frame_skip"], config["gray_scale"]) == (1, 3, True)
    assert obs.shape == (1, 42, 42, 2) and step.obs.dtype == np.uint8
    with make_envpool("envpool:Breakout-v5", 1, repeat_action_probability=0.0) as env:
        assert env.env.pool.config["repeat_action_probability"] == 0.0


def test_atari_false_is_envpools_env_as_it_comes():
    with make_envpool("envpool:Breakout-v5", 1, atari=False, episodic_life=True) as env:
        assert env.atari is None and env.spec.obs_shape == (4, 84, 84)
        config = env.env.pool.config
    assert config["episodic_life"] and config["use_fire_reset"]
    assert config["repeat_action_probability"] == 0.0


def test_actor_threads_split_one_pools_envs():
    """The executor's envs over two actor threads: each thread's pool resets from its
    first env's global index, so the envs are those of one pool of four."""
    from jaxrl_async.config.loader import load_config
    from jaxrl_async.host.actor import ActorPlan, reset_seed
    from jaxrl_async.host.executor import make_actor_envs

    overrides = ["env.name=envpool:CartPole-v1", "env.num_envs=4", "pipeline.actor_threads=2"]
    envs = make_actor_envs(load_config("ppo_cartpole", [*overrides, "train.seed=3"]))
    plans = [ActorPlan(k, 2 * k, 4, 1, 8, 3) for k in range(2)]
    firsts = [env.reset(reset_seed(plan)) for env, plan in zip(envs, plans)]
    actions = cartpole_actions(30, 4)
    steps = [[env.step(a[2 * k : 2 * k + 2]).obs for a in actions] for k, env in enumerate(envs)]
    for env in envs:
        env.close()
    with make_host_env("envpool:CartPole-v1", 4) as whole:
        np.testing.assert_array_equal(np.concatenate(firsts), whole.reset(3))
        for t, a in enumerate(actions):
            np.testing.assert_array_equal(np.concatenate([s[t] for s in steps]), whole.step(a).obs)


def test_render_gives_every_envs_frame():
    with make_envpool("envpool:CartPole-v1", 2, render_mode="rgb_array") as env:
        env.reset(0)
        frames = env.env.render()
    assert frames.shape[0] == 2 and frames.shape[-1] == 3 and frames.dtype == np.uint8


def test_host_envs_by_name():
    """One function builds every host suite's env by its prefix, resetting within the step."""
    assert set(MAKERS) == set(HOST_SUITES)
    assert EnvConfig(name="envpool:CartPole-v1").host
    with make_host_env("envpool:CartPole-v1", 2) as env:
        assert env.autoreset_mode.value == "SameStep" and env.num_envs == 2
    with make_host_env("gymnasium:CartPole-v1", 2) as env:
        assert env.autoreset_mode.value == "SameStep"
    with pytest.raises(ConfigError, match="not a host env"):
        make_host_env("brax:ant", 1)


def test_vectorization_and_autoreset_modes_in_env_kwargs():
    """env.kwargs may name make_vec's modes: another vectorisation is taken, a next-step
    reset (which the actors cannot train from) is refused in one line, for both suites."""
    with make_host_env("gymnasium:CartPole-v1", 2, vectorization_mode="async") as env:
        assert type(env.env).__name__ == "AsyncVectorEnv"
        assert env.autoreset_mode.value == "SameStep"
    with make_host_env("gymnasium:CartPole-v1", 2, autoreset_mode="same_step") as env:
        assert env.autoreset_mode.value == "SameStep"
    for name in ("gymnasium:CartPole-v1", "envpool:CartPole-v1"):
        with pytest.raises(ConfigError, match="same_step") as raised:
            make_host_env(name, 2, autoreset_mode="next_step")
        assert "\n" not in str(raised.value)
    with pytest.raises(ConfigError, match="resets in mode NextStep") as raised:
        make_host_env("gymnasium:CartPole-v1", 2, vectorization_mode="vector_entry_point")


def test_a_missing_envpool_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "envpool", None)  # `import envpool` raises ImportError
    with pytest.raises(ConfigError) as raised:
        make_envpool("envpool:CartPole-v1", 1)
    message = str(raised.value)
    assert "\n" not in message and "pip install 'jaxrl_async[envpool]'" in message


@pytest.mark.parametrize(
    "name,kwargs,error,match",
    [
        ("envpool:CartPol-v1", {}, ConfigError, "no task 'CartPol-v1' .*envpool:CartPole-v1"),
        ("envpool:", {}, ConfigError, "expected envpool:<task>"),
        ("envpool:CartPole-v1", {"no_such_kwarg": 1}, ConfigError, "rejected"),
        ("envpool:CartPole-v1", {"seed": 1}, ConfigError, "adapter's own"),
        ("envpool:CartPole-v1", {"batch_size": 1}, ConfigError, "adapter's own"),
        ("envpool:Breakout-v5", {"stack_num": 2}, ConfigError, "set by the Atari options"),
        ("envpool:Breakout-v5", {"reward_clip": True}, ConfigError, "set by the Atari"),
        ("envpool:Breakout-v5", {"frame_stack": 0}, ConfigError, "must be an int >= 1"),
        ("envpool:Breakout-v5", {"noop_max": 0}, ConfigError, "noop_max .* must be >= 1"),
        ("envpool:Pong-v5", {"atari": False, "noop_max": 0}, ConfigError, "must be >= 1"),
        ("envpool:Breakout-v5", {"atari": "no"}, ConfigError, "must be true or false"),
        ("envpool:CartPole-v1", {"autoreset_mode": "x"}, ConfigError, "autoreset_mode"),
        ("envpool:BinPack-v2", {}, EnvSpecError, "observation\\['ems'\\] space .* cannot be"),
    ],
)
def test_bad_input_is_refused_in_one_line(name, kwargs, error, match):
    with pytest.raises(error, match=match) as raised:
        make_envpool(name, 1, **kwargs)
    assert "\n" not in str(raised.value)


def test_envs_lists_envpools_tasks(capsys):
    from jaxrl_async import cli

    assert cli.main(["envs", "envpool"]) == 0
    out = capsys.readouterr().out
    assert "envpool (host envs): " in out and "env.name=envpool:<task>" in out
    assert "CartPole-v1" in out and "Breakout-v5" in out


def test_ppo_trains_on_an_envpool_through_the_executor():
    """A short PPO run on envpool:CartPole-v1: every env step counted once, one update a
    round, episodes reported with CartPole's raw returns (1 a step)."""
    import jaxrl_async

    overrides = [
        "env.name=envpool:CartPole-v1",
        "env.num_envs=4",
        "pipeline.rollout_len=16",
        "pipeline.lag=1",
        "agent.hidden_sizes=[16]",
        "agent.num_minibatches=2",
        "train.total_steps=2048",
        "train.log_every=512",
        "train.progress=false",
    ]
    records: list[dict] = []
    config = jaxrl_async.load_config("ppo_cartpole", overrides)
    result = jaxrl_async.train(config, callbacks=[records.append])
    assert [r["env_steps"] for r in records] == [512, 1024, 1536, 2048]
    assert result.summary["env_steps"] == 2048 and result.summary["updates"] == 2048 // 64
    assert all(r["episodes"] > 0 for r in records)
    returns = np.array([r["episode_return"] for r in records])
    lengths = np.array([r["episode_length"] for r in records])
    np.testing.assert_allclose(returns, lengths)  # CartPole pays 1 a step
    assert np.all(returns >= 8)  # CartPole cannot fall in fewer steps
