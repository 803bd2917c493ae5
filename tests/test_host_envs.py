"""The host adapters (`jaxrl_async.host`) against each env's own loop, step by step.

The reference steps single Gymnasium envs (`gymnasium.make`) one at a time, seeded as a
vector env seeds them, and resets them where an episode ended as each autoreset mode
says: at once (same-step, the last observation kept as the final one) or on the env's next
step (next-step, a step that is no transition). The adapter must give the same
observations, rewards, flags, final observations, valid masks and raw episode returns.
Nothing here compiles: numpy only.
"""

from __future__ import annotations

import sys
import uuid

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

from jaxrl_async.errors import ConfigError, EnvSpecError
from jaxrl_async.host import HostStep, make_gymnasium, map_spaces, parse_name
from tests.helpers import host_envs
from tests.helpers.host_envs import FORWARD, LIMIT, STAY

MODES = ["same_step", "next_step"]
FIELDS = HostStep._fields


def reference(env_id, kwargs, seed, actions, mode, start_action=0):
    """Single envs stepped one at a time: (first obs [B], rows [T][B] of one env's HostStep)."""
    envs = [gymnasium.make(env_id, **kwargs) for _ in range(actions.shape[1])]
    first = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    pending, totals, rows = [False] * len(envs), [(0.0, 0)] * len(envs), []
    for actions_t in actions:
        row = []
        for i, env in enumerate(envs):
            if pending[i]:  # next-step: this step only resets the env
                obs, _ = env.reset()
                pending[i] = False
                row.append(
                    HostStep(
                        obs=obs,
                        reward=0.0,
                        terminated=False,
                        truncated=False,
                        final_obs=obs,
                        valid=False,
                        episode_return=0.0,
                        episode_length=0,
                        episode_done=False,
                    )
                )
                continue
            obs, reward, terminated, truncated, _ = env.step(actions_t[i] + start_action)
            totals[i] = (totals[i][0] + reward, totals[i][1] + 1)
            final, done = obs, terminated or truncated
            if done and mode == "same_step":
                obs, _ = env.reset()
            pending[i] = done and mode == "next_step"
            row.append(
                HostStep(
                    obs=obs,
                    reward=reward,
                    terminated=terminated,
                    truncated=truncated,
                    final_obs=final,
                    valid=True,
                    episode_return=totals[i][0] if done else 0.0,
                    episode_length=totals[i][1] if done else 0,
                    episode_done=done,
                )
            )
            if done:
                totals[i] = (0.0, 0)
        rows.append(row)
    return first, rows


def stack(rows_of_obs):
    """[T][B] observations (arrays or dicts) -> an array [T, B, ...] or a dict of them."""
    if isinstance(rows_of_obs[0][0], dict):
        return {
            k: np.array([[o[k] for o in row] for row in rows_of_obs]) for k in rows_of_obs[0][0]
        }
    return np.array([[np.asarray(o) for o in row] for row in rows_of_obs])


def run_adapter(env, seed, actions):
    """(first obs, HostStep of arrays [T, B, ...]) of the adapter over `actions` [T, B]."""
    first = env.reset(seed)
    steps = [env.step(a) for a in actions]
    fields = {}
    for name in FIELDS:
        values = [getattr(s, name) for s in steps]
        fields[name] = (
            {k: np.stack([v[k] for v in values]) for k in values[0]}
            if isinstance(values[0], dict)
            else np.stack(values)
        )
    return first, HostStep(**fields)


def assert_same(got, want, what):
    if isinstance(want, dict):
        assert set(got) == set(want), what
        for k in want:
            assert_same(got[k], want[k], f"{what}[{k!r}]")
        return
    assert got.shape == want.shape, (what, got.shape, want.shape)
    np.testing.assert_array_equal(got, want, err_msg=what)


def assert_matches_reference(adapter, ref, convert=lambda obs: obs):
    (first, got), (ref_first, rows) = adapter, ref
    first_want = stack([ref_first])
    first_want = (
        {k: v[0] for k, v in first_want.items()} if isinstance(first_want, dict) else first_want[0]
    )
    assert_same(first, convert(first_want), "first obs")
    for name in FIELDS:
        want = stack([[getattr(r, name) for r in row] for row in rows])
        want = convert(want) if name in ("obs", "final_obs") else want
        assert_same(
            getattr(got, name),
            want.astype(np.asarray(getattr(got, name)).dtype)
            if not isinstance(want, dict)
            else want,
            name,
        )


@pytest.mark.parametrize("mode", MODES)
def test_cartpole_matches_single_envs_step_by_step(mode):
    """Random actions, a time limit of 12 (an env kwarg) so that both kinds of end come."""
    actions = np.random.default_rng(0).integers(0, 2, (80, 4)).astype(np.int32)
    with make_gymnasium(
        "gymnasium:CartPole-v1",
        4,
        vectorization_mode="sync",
        autoreset_mode=mode,
        max_episode_steps=12,
    ) as env:
        assert env.autoreset_mode.value == {"same_step": "SameStep", "next_step": "NextStep"}[mode]
        got = run_adapter(env, 7, actions)
    ref = reference("CartPole-v1", {"max_episode_steps": 12}, 7, actions, mode)
    assert_matches_reference(got, ref)
    step = got[1]
    assert step.terminated.any() and step.truncated.any()  # both kinds of end were tested
    assert step.obs.dtype == np.float32 and step.reward.dtype == np.float32
    assert (step.valid.all()) == (mode == "same_step")
    assert np.all(step.episode_length[step.truncated] == 12)
    assert np.all(step.episode_return == step.episode_length)  # CartPole pays 1 a step


def test_cartpole_vector_entry_point_keeps_its_own_next_step_mode():
    """CartPole's own vector env (next-step only) against its raw loop: the step after an
    end is not valid and pays nothing; elsewhere the raw outputs pass unchanged."""
    actions = np.random.default_rng(1).integers(0, 2, (60, 3)).astype(np.int32)
    actions[:, 0] = 1  # always pushing right falls over before the time limit
    with make_gymnasium("gymnasium:CartPole-v1", 3, max_episode_steps=12) as env:
        assert env.autoreset_mode == gymnasium.vector.AutoresetMode.NEXT_STEP
        first, step = run_adapter(env, 3, actions)
    raw = gymnasium.make_vec("CartPole-v1", 3, max_episode_steps=12)
    np.testing.assert_array_equal(first, raw.reset(seed=3)[0])
    ended = np.zeros(3, bool)
    for t, a in enumerate(actions):
        obs, reward, terminated, truncated, _ = raw.step(a)
        np.testing.assert_array_equal(step.obs[t], obs)
        np.testing.assert_array_equal(step.final_obs[t], obs)
        np.testing.assert_array_equal(step.valid[t], ~ended)
        np.testing.assert_array_equal(step.reward[t], np.where(ended, 0.0, reward))
        np.testing.assert_array_equal(step.terminated[t], terminated)
        np.testing.assert_array_equal(step.truncated[t], truncated)
        ended = terminated | truncated
    assert step.terminated.any() and step.truncated.any() and not step.valid.all()
    raw.close()


def corridor_actions(steps=12):
    """Env 0 always walks forward (terminates); env 1 always stays (truncated at LIMIT)."""
    return np.tile(np.array([FORWARD, STAY], np.int32), (steps, 1))


@pytest.mark.parametrize("mode", MODES)
def test_corridor_matches_single_envs_step_by_step(mode):
    actions = corridor_actions()
    with make_gymnasium(
        "gymnasium:HostCorridor-v0", 2, vectorization_mode="sync", autoreset_mode=mode
    ) as env:
        got = run_adapter(env, 11, actions)
    assert_matches_reference(got, reference("HostCorridor-v0", {}, 11, actions, mode))


def test_corridor_same_step_ends_by_hand():
    """Where each episode ends, what it returned, and the final observations; sync vector
    envs reset in the same step unless told otherwise."""
    with make_gymnasium("gymnasium:HostCorridor-v0", 2, vectorization_mode="sync") as env:
        assert env.autoreset_mode == gymnasium.vector.AutoresetMode.SAME_STEP
        first, step = run_adapter(env, 4, corridor_actions())
    stayer_ends = [LIMIT - 1, 2 * LIMIT - 1]
    assert list(np.flatnonzero(step.truncated[:, 1])) == stayer_ends
    assert not step.terminated[:, 1].any() and step.valid.all()
    for t in stayer_ends:  # truncated: the final obs is the last one, obs the next reset's
        assert step.final_obs[t, 1, 1] == LIMIT and step.obs[t, 1, 1] == 0
        assert step.episode_return[t, 1] == LIMIT * host_envs.STEP_REWARD[STAY]
        assert step.episode_length[t, 1] == LIMIT
    walk = host_envs.LENGTH - int(first[0, 0])  # steps from the seeded start to the goal
    t = walk - 1
    assert step.terminated[t, 0] and not step.truncated[t, 0]
    assert step.final_obs[t, 0, 0] == host_envs.LENGTH and step.obs[t, 0, 1] == 0
    assert step.episode_return[t, 0] == walk + host_envs.GOAL_BONUS
    assert step.reward[t, 0] == 1 + host_envs.GOAL_BONUS
    not_ended = ~step.done
    np.testing.assert_array_equal(step.final_obs[not_ended], step.obs[not_ended])
    assert np.all(step.episode_return[not_ended] == 0)


def test_corridor_next_step_ends_by_hand():
    """The step after an end resets only: not valid, no reward, no flags, its action lost."""
    with make_gymnasium(
        "gymnasium:HostCorridor-v0", 2, vectorization_mode="sync", autoreset_mode="next_step"
    ) as env:
        _, step = run_adapter(env, 4, corridor_actions())
    assert list(np.flatnonzero(step.truncated[:, 1])) == [LIMIT - 1, 2 * LIMIT]
    assert list(np.flatnonzero(~step.valid[:, 1])) == [LIMIT, 2 * LIMIT + 1]
    t = LIMIT - 1
    assert step.obs[t, 1, 1] == LIMIT and step.final_obs[t, 1, 1] == LIMIT
    assert step.obs[t + 1, 1, 1] == 0  # the reset step's observation starts the next episode
    invalid = ~step.valid
    assert not (step.reward[invalid].any() or step.done[invalid].any())
    assert np.all(step.episode_length[:, 1][step.truncated[:, 1]] == LIMIT)
    assert step.episode_return[LIMIT - 1, 1] == LIMIT * host_envs.STEP_REWARD[STAY]
    walks = step.episode_length[:, 0][step.terminated[:, 0]]  # from a start of 0 or 1
    assert len(walks) >= 2 and set(walks) <= {host_envs.LENGTH - 1, host_envs.LENGTH}
    np.testing.assert_array_equal(
        step.episode_return[:, 0][step.terminated[:, 0]], walks + host_envs.GOAL_BONUS
    )


def dict_obs_as_spec(obs):
    """The dict Corridor's observations as the spec says: float32 position, one-hot steps."""
    return {
        "position": np.asarray(obs["position"], np.float32),
        "steps": np.eye(LIMIT + 1, dtype=np.float32)[np.asarray(obs["steps"]) - 1],
    }


@pytest.mark.parametrize("mode", MODES)
def test_dict_observations_and_action_start_match_single_envs(mode):
    kwargs = {"dict_obs": True, "start_action": 3}
    actions = corridor_actions()
    with make_gymnasium(
        "gymnasium:HostCorridor-v0", 2, vectorization_mode="sync", autoreset_mode=mode, **kwargs
    ) as env:
        assert env.spec.obs_shape == {"position": (1,), "steps": (LIMIT + 1,)}
        assert env.spec.obs_dtype == {"position": np.float32, "steps": np.float32}
        assert env.spec.discrete and env.spec.num_actions == 2
        got = run_adapter(env, 5, actions)
    ref = reference("HostCorridor-v0", kwargs, 5, actions, mode, start_action=3)
    assert_matches_reference(got, ref, dict_obs_as_spec)
    assert got[1].truncated.any() and got[1].terminated.any()


@pytest.mark.parametrize("mode", MODES)
def test_same_seed_same_trajectory(mode):
    actions = np.random.default_rng(2).integers(0, 2, (40, 3)).astype(np.int32)

    def run(seed):
        with make_gymnasium(
            "gymnasium:CartPole-v1", 3, vectorization_mode="sync", autoreset_mode=mode
        ) as env:
            return run_adapter(env, seed, actions)

    (first_a, a), (first_b, b), (first_c, _) = run(9), run(9), run(10)
    np.testing.assert_array_equal(first_a, first_b)
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert not np.array_equal(first_a, first_c)


def test_a_users_module_registers_its_env(tmp_path, monkeypatch):
    """`gymnasium:<module>:<id>` imports the module, whose registration runs then."""
    module = f"user_envs_{uuid.uuid4().hex[:8]}"
    env_id = f"UserCorridor{uuid.uuid4().hex[:6]}-v0"
    (tmp_path / f"{module}.py").write_text(
        "import gymnasium\n"
        f"gymnasium.register(id={env_id!r}, entry_point='tests.helpers.host_envs:Corridor',"
        " max_episode_steps=4)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(ConfigError, match="name the module that registers it"):
            make_gymnasium(f"gymnasium:{env_id}", 1)
        with make_gymnasium(f"gymnasium:{module}:{env_id}", 2, vectorization_mode="sync") as env:
            env.reset(0)
            steps = [env.step(np.zeros(2, np.int32)) for _ in range(4)]
        assert steps[-1].truncated.all() and env.spec.obs_shape == (2,)
    finally:
        gymnasium.registry.pop(env_id, None)
        sys.modules.pop(module, None)


UNMAPPABLE = [
    ("observation", spaces.Tuple([spaces.Discrete(2), spaces.Discrete(3)]), "Tuple"),
    ("observation", spaces.Text(5), "Text"),
    ("observation", spaces.Graph(spaces.Box(0, 1, (2,)), spaces.Discrete(2)), "Graph"),
    ("observation", spaces.Sequence(spaces.Discrete(2)), "Sequence"),
    ("observation", spaces.MultiDiscrete([2, 3]), "MultiDiscrete"),
    ("observation", spaces.Dict({"a": spaces.Dict({"b": spaces.Discrete(2)})}), "Dict"),
    ("observation", spaces.Dict({"a": spaces.Box(0, 1, (2, 2)), "b": spaces.Text(3)}), "Text"),
    ("action", spaces.MultiDiscrete([2, 2]), "MultiDiscrete"),
    ("action", spaces.Tuple([spaces.Discrete(2)]), "Tuple"),
    ("action", spaces.Box(0, 3, (2,), np.int64), "Box"),
]


@pytest.mark.parametrize("what,space,shown", UNMAPPABLE, ids=[f"{w}-{s}" for w, _, s in UNMAPPABLE])
def test_unmappable_spaces_are_refused_in_one_line(what, space, shown):
    other = spaces.Discrete(2) if what == "observation" else spaces.Box(0, 1, (2,))
    pair = (space, other) if what == "observation" else (other, space)
    with pytest.raises(EnvSpecError) as raised:
        make_gymnasium(
            "gymnasium:HostSpaces-v0",
            2,
            vectorization_mode="sync",
            observation_space=pair[0],
            action_space=pair[1],
        )
    message = str(raised.value)
    assert "\n" not in message and "gymnasium:HostSpaces-v0" in message
    assert f"{what} space" in message or f"{what}[" in message
    assert shown + "(" in message


def test_spaces_map_onto_the_env_spec():
    obs_space = spaces.Dict(
        {
            "cell": spaces.Discrete(4, start=2),
            "bits": spaces.MultiBinary(3),
            "wide": spaces.Box(-1, 1, (2,), np.float64),
            "count": spaces.Box(0, 9, (), np.int64),
            "frame": spaces.Box(0, 255, (2, 2, 1), np.uint8),
        }
    )
    mapped = map_spaces("t", obs_space, spaces.Box(-2, 2, (3,), np.float64))
    spec = mapped.spec
    assert spec.obs_shape == {
        "cell": (4,),
        "bits": (3,),
        "wide": (2,),
        "count": (),
        "frame": (2, 2, 1),
    }
    assert spec.obs_dtype == {
        "cell": np.float32,
        "bits": np.float32,
        "wide": np.float32,
        "count": np.int32,
        "frame": np.uint8,
    }
    assert not spec.discrete and spec.action_dtype == np.float32
    np.testing.assert_array_equal(spec.action_low, [-2, -2, -2])
    batch = obs_space.sample()
    batch = {k: np.stack([v, v]) for k, v in batch.items()}
    seen = mapped.observe(batch)
    np.testing.assert_array_equal(seen["cell"].argmax(-1), batch["cell"] - 2)
    assert seen["cell"].sum() == 2
    for key, value in seen.items():
        assert value.dtype == spec.obs_dtype[key] and value.shape[1:] == spec.obs_shape[key]
    assert mapped.act(np.zeros((2, 3), np.float32)).dtype == np.float64
    discrete = map_spaces("t", spaces.Box(0, 1, (1,)), spaces.Discrete(5, start=-1))
    assert discrete.spec.num_actions == 5 and discrete.spec.action_dtype == np.int32
    np.testing.assert_array_equal(discrete.act(np.array([0, 4], np.int32)), [-1, 3])


@pytest.mark.parametrize(
    "name", ["CartPole-v1", "gymnasium:", "gymnasium:a:b:c", "gymnasium::X-v0"]
)
def test_malformed_names_are_refused_in_one_line(name):
    with pytest.raises(ConfigError) as raised:
        parse_name(name)
    assert "\n" not in str(raised.value)


def test_names_parse_with_and_without_a_module():
    assert parse_name("gymnasium:CartPole-v1") == (None, "CartPole-v1")
    assert parse_name("gymnasium:ALE/Pong-v5") == (None, "ALE/Pong-v5")
    assert parse_name("gymnasium:my.envs:Corridor-v0") == ("my.envs", "Corridor-v0")


def test_bad_kwargs_and_modes_are_refused_in_one_line():
    for kwargs, match in (
        ({"no_such_kwarg": 1}, "rejected"),
        ({"vector_kwargs": {}}, "make_vec's own"),
        ({"autoreset_mode": "same_step"}, "resets in mode NextStep"),
        ({"autoreset_mode": "disabled"}, "autoreset_mode must be"),
        ({"vectorization_mode": "threads"}, "vectorization_mode must be"),
    ):
        with pytest.raises(ConfigError, match=match) as raised:
            make_gymnasium("gymnasium:CartPole-v1", 2, **kwargs)
        assert "\n" not in str(raised.value)


def test_actions_of_the_wrong_shape_are_refused():
    with make_gymnasium("gymnasium:CartPole-v1", 2) as env:
        env.reset(0)
        with pytest.raises(ValueError, match="actions of shape"):
            env.step(np.zeros(3, np.int32))
