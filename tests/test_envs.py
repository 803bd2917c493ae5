"""Environments: `make` and `check_env` for every gymnax id, the wrappers, truncation
bootstrapping."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from jaxrl_async.agents.ppo import PPOConfig, make_ppo
from jaxrl_async.envs import (
    CastObservation,
    EnvSpec,
    EpisodeStatistics,
    VecEnv,
    check_env,
    make,
    make_batched,
    registered_envs,
)
from jaxrl_async.errors import ConfigError, EnvSpecError
from jaxrl_async.nn.networks import ValueHead
from tests.helpers.probe_envs import (
    NoiseEnv,
    WalkEnv,
    advantages_reference,
    walk_rollout,
)

# ---------------------------------------------------------------------------------------------
# make / check_env for every registered gymnax id


def _fake_mnist(*args, **kwargs):
    """Stands in for gymnax's MNIST download (MNISTBandit-bsuite loads it in __init__)."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 127, (16, 28, 28), dtype=np.int8)
    labels = rng.integers(0, 10, (16,), dtype=np.uint8)
    return (images, labels), (images, labels)


# gymnax declares an observation dtype these envs do not emit; `make` casts them.
_SPACE_DTYPE_MISMATCH = ("Catch-bsuite", "FourRooms-misc")


def _env_ids() -> list:
    return registered_envs()


def test_registered_envs_are_the_26_gymnax_ids():
    names = registered_envs()
    assert len(names) == 26 and len(set(names)) == 26
    assert {
        "CartPole-v1",
        "Pendulum-v1",
        "Breakout-MinAtar",
        "Catch-bsuite",
        "MNISTBandit-bsuite",
        "FourRooms-misc",
    } <= set(names)


@pytest.mark.parametrize("name", _env_ids())
def test_make_and_check_env_for_every_gymnax_id(name, monkeypatch):
    import gymnax.utils.load_mnist

    monkeypatch.setattr(gymnax.utils.load_mnist, "load_mnist", _fake_mnist)
    env, params = make(name)
    spec = check_env(env, params)
    assert isinstance(spec, EnvSpec)
    assert isinstance(env, CastObservation) == (name in _SPACE_DTYPE_MISMATCH)
    assert spec.obs_shape == tuple(env.observation_space(params).shape)
    action_space = env.action_space(params)
    if spec.discrete:
        assert spec.num_actions == action_space.n >= 1
    else:
        assert spec.action_shape == tuple(action_space.shape)


def test_make_unknown_id_raises_config_error():
    with pytest.raises(ConfigError, match="Nope-v0"):
        make("Nope-v0")


def test_check_env_accepts_the_test_env():
    env = WalkEnv()
    spec = check_env(env, env.default_params)
    assert spec == EnvSpec((2,), np.dtype(np.float32), True, 2, (), np.dtype(np.int32))


# ---------------------------------------------------------------------------------------------
# EpisodeStatistics

# Episodes (max_steps=4, goal=3): terminated after 3 steps (return 4.5); truncated after 4
# (return 2.0); terminated and truncated at once after 4 (return 5.0); then one unfinished step.
ACTIONS = [1, 1, 1, 0, 0, 0, 0, 1, 0, 1, 1, 1]
EPISODES = [(4.5, 3), (2.0, 4), (5.0, 4)]


def _episode_stats_reference(rewards, dones):
    """Per step: (done, return, length) of the episode ending there, zeros elsewhere."""
    out, ret, length = [], 0.0, 0
    for reward, done in zip(rewards, dones):
        ret, length = ret + reward, length + 1
        out.append((done, ret if done else 0.0, length if done else 0))
        if done:
            ret, length = 0.0, 0
    return out, (ret, length)


def _run_actions(env, params, actions):
    _obs, state = env.reset(jax.random.PRNGKey(0), params)

    def step(state, inp):
        key, action = inp
        _, state, reward, terminated, truncated, info = env.step(key, state, action, params)
        return state, (reward, terminated, truncated, info)

    keys = jax.random.split(jax.random.PRNGKey(1), len(actions))
    return jax.lax.scan(step, state, (keys, jnp.asarray(actions, jnp.int32)))


def test_episode_statistics_over_terminated_and_truncated_episodes():
    env = EpisodeStatistics(WalkEnv())
    state, (reward, terminated, truncated, info) = jax.jit(_run_actions, static_argnums=0)(
        env, env.default_params, ACTIONS
    )
    terminated, truncated = np.asarray(terminated), np.asarray(truncated)
    # The action sequence gives one episode of each kind of ending.
    done_steps = np.flatnonzero(terminated | truncated).tolist()
    assert done_steps == [2, 6, 10]
    assert terminated[2] and not truncated[2]
    assert truncated[6] and not terminated[6]
    assert terminated[10] and truncated[10]

    expected, (open_return, open_length) = _episode_stats_reference(
        np.asarray(reward).tolist(), (terminated | truncated).tolist()
    )
    np.testing.assert_array_equal(info["episode_done"], [e[0] for e in expected])
    np.testing.assert_allclose(info["episode_return"], [e[1] for e in expected])
    np.testing.assert_array_equal(info["episode_length"], [e[2] for e in expected])
    done = np.asarray(info["episode_done"])
    assert (
        list(
            zip(
                np.asarray(info["episode_return"])[done].tolist(),
                np.asarray(info["episode_length"])[done].tolist(),
            )
        )
        == EPISODES
    )
    # The unfinished episode is carried in the state.
    assert float(state.episode_return) == pytest.approx(open_return) == 1.5
    assert int(state.episode_length) == open_length == 1


def test_episode_statistics_vmapped_equals_looped():
    actions = np.array([ACTIONS, [0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1]], np.int32)  # [B, T]
    base = EpisodeStatistics(WalkEnv())
    params = base.default_params
    vec = VecEnv(base)
    _obs, state = vec.reset(jax.random.split(jax.random.PRNGKey(0), 2), params)
    infos = []
    for t in range(actions.shape[1]):
        _obs, state, _reward, _terminated, _truncated, info = vec.step(
            jax.random.split(jax.random.PRNGKey(t), 2), state, jnp.asarray(actions[:, t]), params
        )
        infos.append(info)
    for b in range(2):
        _, (_, _, _, single) = _run_actions(base, params, actions[b].tolist())
        for field in ("episode_done", "episode_return", "episode_length"):
            np.testing.assert_allclose(
                [np.asarray(i[field])[b] for i in infos], np.asarray(single[field]), err_msg=field
            )


# ---------------------------------------------------------------------------------------------
# Auto-reset and truncation bootstrapping in PPO


from jaxrl_async.agents.common import fold_truncation  # noqa: E402
from jaxrl_async.agents.returns import gae  # noqa: E402


@pytest.mark.parametrize("seed", [0, 1])
def test_ppo_style_gae_matches_truncation_aware_reference(seed):
    rng = np.random.default_rng(seed)
    T, B, gamma, lambda_ = 20, 4, 0.95, 0.9
    terminated = rng.random((T, B)) < 0.1
    truncated = rng.random((T, B)) < 0.1
    terminated[3, 0] = truncated[3, 0] = True  # both at once: no bootstrap
    truncated[5, 1], terminated[5, 1] = True, False
    done = terminated | truncated
    # V(s'_t) equals V(s_{t+1}) unless the episode ended at t (then s_{t+1} is a reset state).
    values = rng.normal(size=(T, B)).astype(np.float32)
    next_values = np.concatenate([values[1:], rng.normal(size=(1, B))]).astype(np.float32)
    next_values = np.where(done, rng.normal(size=(T, B)) * 3, next_values).astype(np.float32)
    rewards = rng.normal(size=(T, B)).astype(np.float32)

    expected = advantages_reference(
        values.tolist(),
        next_values.tolist(),
        rewards.tolist(),
        terminated.astype(int).tolist(),
        truncated.astype(int).tolist(),
        gamma,
        lambda_,
    )
    # as PPO's targets: the truncation folded into the rewards, then GAE
    rewards_, discounts = fold_truncation(
        *map(jnp.asarray, (rewards, next_values, terminated, truncated)), gamma
    )
    got = gae(jnp.asarray(values), jnp.asarray(next_values)[-1], rewards_, discounts, lambda_)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_ppo_learn_bootstraps_truncated_steps_from_final_observation():
    """End to end: rollout with auto-reset, then PPO's learn; advantages read from its metrics.

    With one epoch of one minibatch, unnormalised advantages, no value clipping and the
    behaviour log-probabilities equal to the current ones (ratio 1), the first and only
    gradient step reports pg_loss = -mean(A) and value_loss = mean(A^2) / 2.
    """
    T, B = 16, 4
    params = WalkEnv().default_params
    config = PPOConfig(
        hidden_sizes=(8,),
        num_epochs=1,
        num_minibatches=1,
        normalize_advantages=False,
        clip_value=False,
        ent_coef=0.0,
        anneal_lr=False,
        gamma=0.9,
        gae_lambda=0.8,
    )
    pipeline, state, traj = walk_rollout(lambda ctx: make_ppo(config, ctx), T, B)

    obs, next_obs = np.asarray(traj.obs), np.asarray(traj.next_obs)
    terminated, truncated = np.asarray(traj.terminated), np.asarray(traj.truncated)
    done = terminated | truncated
    assert (truncated & ~terminated).any() and terminated.any(), "need both kinds of ending"
    # Auto-reset: the step after an episode end starts from the reset observation, while
    # next_obs keeps the observation the episode ended in.
    assert (obs[1:][done[:-1]] == 0).all()
    np.testing.assert_array_equal(next_obs[truncated & ~terminated][:, 1], params.max_steps)
    assert (next_obs[done][:, 1] >= 1).all()
    np.testing.assert_array_equal(next_obs[:-1][~done[:-1]], obs[1:][~done[:-1]])

    critic = ValueHead(config.torso_spec())
    value = lambda o: np.asarray(  # noqa: E731
        critic.apply(
            state.learner.params["critic"],
            jnp.asarray(o.reshape(-1, 2)),
        )
    ).reshape(T, B)
    values, next_values = value(obs), value(next_obs)
    args = (values.tolist(), next_values.tolist(), np.asarray(traj.reward).tolist())
    gamma, lam = config.gamma, config.gae_lambda
    expected = advantages_reference(
        *args, terminated.astype(int).tolist(), truncated.astype(int).tolist(), gamma, lam
    )
    # The test can tell the right handling from the usual mistakes.
    no_bootstrap = advantages_reference(
        *args, done.astype(int).tolist(), truncated.astype(int).tolist(), gamma, lam
    )
    reset_obs_values = np.concatenate([values[1:], next_values[-1:]])
    from_reset_obs = advantages_reference(
        values.tolist(),
        reset_obs_values.tolist(),
        args[2],
        terminated.astype(int).tolist(),
        truncated.astype(int).tolist(),
        gamma,
        lam,
    )
    for wrong in (no_bootstrap, from_reset_obs):
        assert abs(wrong.mean() - expected.mean()) > 1e-3

    _, metrics, _ = jax.jit(pipeline.learn)(state.learner, traj, jax.random.PRNGKey(2))
    assert float(metrics["pg_loss"]) == pytest.approx(-expected.mean(), rel=1e-4, abs=1e-5)
    assert float(metrics["value_loss"]) == pytest.approx(
        0.5 * np.mean(expected**2), rel=1e-4, abs=1e-5
    )


# ---------------------------------------------------------------------------------------------
# NormalizeObservation


def test_normalize_observation_running_stats_match_numpy():
    num_envs, steps = 8, 60
    env = make_batched(NoiseEnv(), normalize_obs=True)
    obs, state = env.reset(jax.random.split(jax.random.PRNGKey(0), num_envs))
    raw = [np.asarray(state.env_state.env_state.raw_obs)]

    @jax.jit
    def step(state, key):
        return env.step(jax.random.split(key, num_envs), state, jnp.zeros(num_envs, jnp.int32))

    for key in jax.random.split(jax.random.PRNGKey(1), steps):
        obs, state, _, _, _, info = step(state, key)
        raw.append(np.asarray(state.env_state.env_state.raw_obs))
    seen = np.concatenate(raw).astype(np.float64)  # [(steps + 1) * num_envs, 3]

    assert float(state.count) == pytest.approx(len(seen), abs=1e-3)
    np.testing.assert_allclose(state.mean, seen.mean(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(state.var, seen.var(0), rtol=1e-3)
    # The statistics are of the raw observations, not of MU/SIGMA by luck: check they moved.
    np.testing.assert_allclose(state.mean, NoiseEnv.MU, atol=1.5)
    # The env hands out raw observations; `observe` normalises them with the statistics.
    np.testing.assert_allclose(obs, raw[-1], rtol=1e-6)
    np.testing.assert_allclose(info["final_observation"], raw[-1], rtol=1e-6)
    expected = np.clip((raw[-1] - seen.mean(0)) / np.sqrt(seen.var(0) + 1e-8), -10, 10)
    np.testing.assert_allclose(env.observe(state, obs), expected, rtol=1e-3, atol=1e-3)
    assert env.obs_stats(state).env_state is None


# ---------------------------------------------------------------------------------------------
# check_env rejections


class WrongShapeEnv(WalkEnv):
    def observation_space(self, params):
        return spaces.Box(0.0, 100.0, (3,), jnp.float32)


class WrongDtypeEnv(WalkEnv):
    def _obs(self, state):
        return jnp.stack([state.pos, state.time]).astype(jnp.int32)


class OldGymStepEnv(WalkEnv):
    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = super().step(key, state, action, params)
        return obs, state, reward, jnp.logical_or(terminated, truncated), info


class NoFinalObservationEnv(WalkEnv):
    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, _ = super().step(key, state, action, params)
        return obs, state, reward, terminated, truncated, {}


class VectorRewardEnv(WalkEnv):
    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = super().step(key, state, action, params)
        return obs, state, reward[None], terminated, truncated, info


@pytest.mark.parametrize(
    "env_cls, words",
    [
        (WrongShapeEnv, ["observation", "(2,)", "(3,)"]),
        (WrongDtypeEnv, ["observation", "int32", "float32"]),
        (OldGymStepEnv, ["terminated", "truncated", "gymnax 1.0"]),
        (NoFinalObservationEnv, ["final_observation"]),
        (VectorRewardEnv, ["reward", "scalar"]),
    ],
)
def test_check_env_rejects_with_one_line(env_cls, words):
    env = env_cls()
    with pytest.raises(EnvSpecError) as info:
        check_env(env, env.default_params)
    message = str(info.value)
    assert message and "\n" not in message
    for word in words:
        assert word in message


# ---------------------------------------------------------------------------------------------
# `jaxrl-async envs`


NO_NET = {
    "https_proxy": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "no_proxy": "",
    "NO_PROXY": "",
}


@pytest.mark.slow
def test_cli_envs_lists_every_id_and_every_suite(cli, tmp_path):
    # No network for the subprocess: listing environments must not need it.
    from jaxrl_async.envs import suites

    result = cli("envs", cwd=tmp_path, timeout=180, env=NO_NET)
    assert result.returncode == 0, result.stderr[-2000:]
    gymnax_part, *suite_parts, host_part = result.stdout.split("\n\n")
    listed = [line.split()[0] for line in gymnax_part.splitlines() if line.strip()]
    assert listed == registered_envs()
    heads = [part.splitlines()[0].split(":")[0] for part in suite_parts]
    assert heads == list(suites.SUITES)
    # Then the host envs: Gymnasium's ids, counted (`envs gymnasium` lists them).
    assert (
        host_part.startswith("gymnasium (host envs): ") and "env.name=gymnasium:<id>" in host_part
    )
    for part in suite_parts:  # installed by the test lock: each with its ids
        name = part.split(":")[0]
        assert "ids (env.name=" in part.splitlines()[0]
        assert suites.SUITES[name].example in part
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_cli_envs_of_one_suite_shows_spaces(cli, tmp_path):
    result = cli("envs", "jumanji", cwd=tmp_path, timeout=300, env=NO_NET)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert "action_mask: Box((4,), bool" in lines["jumanji:Snake-v1"]
    assert "unavailable" in lines["jumanji:Sokoban-v0"]  # its levels need a download
    bad = cli("envs", "nope", cwd=tmp_path, timeout=60)
    assert bad.returncode == 2 and "unknown suite 'nope'" in bad.stderr


def test_making_a_gymnax_env_defers_its_renderers_plotting_modules():
    """seaborn (with scipy.stats) and matplotlib.pyplot, which gymnax imports for `render`,
    are not loaded by making and stepping an env, and load in full on first use."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import sys
        import jax
        from jaxrl_async import envs
        env, params = envs.make("Pong-misc")
        obs, state = env.reset(jax.random.key(0), params)
        env.step(jax.random.key(1), state, 0, params)
        assert "scipy.stats" not in sys.modules and "pandas" not in sys.modules
        import seaborn as sns
        import matplotlib
        import matplotlib.pyplot as plt
        assert len(sns.color_palette("cubehelix", 3)) == 3  # what Pong's render calls
        import seaborn
        assert type(seaborn).__name__ == "module" and seaborn.__version__
        matplotlib.use("Agg")
        assert plt.subplots is matplotlib.pyplot.subplots and "scipy.stats" in sys.modules
        from gymnax.environments.misc import pong
        assert pong.sns.color_palette is seaborn.color_palette
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
