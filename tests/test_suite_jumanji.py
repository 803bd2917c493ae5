"""The jumanji adapter (`jumanji:<id>`) against jumanji's own API: the same observations
and rewards for the same keys and actions, episode ends, auto-reset, action masks
(flattened MultiDiscrete spaces included) and one-line errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async

jumanji = pytest.importorskip("jumanji")

from jumanji import registration
from jumanji.environments import Snake

from jaxrl_async.envs import suites
from jaxrl_async.envs.spec import check_env
from jaxrl_async.errors import ConfigError, UserError
from tests.helpers.learning import assert_learns, random_return

UP, RIGHT = 0, 1


def as_dict(observation, names):
    """A jumanji observation as our flat dict (nested fields "outer.inner")."""
    out = {}
    for name in names:
        value = observation
        for part in name.split("."):
            value = getattr(value, part)
        out[name] = value
    return out


def rollout(env, key, steps, policy):
    """The adapter from reset(key): `steps` steps of policy(obs, t), one key each."""
    reset_key, step_keys = jax.random.split(key)
    step_keys = jax.random.split(step_keys, steps)

    @jax.jit
    def run(reset_key, step_keys):
        obs, state = env.reset(reset_key, None)

        def body(carry, x):
            obs, state = carry
            t, k = x
            obs, state, reward, terminated, truncated, info = env.step(
                k, state, policy(obs, t), None
            )
            return (obs, state), (obs, reward, terminated, truncated, info["final_observation"])

        _, out = jax.lax.scan(body, (obs, state), (jnp.arange(steps), step_keys))
        return obs, out

    return reset_key, step_keys, run(reset_key, step_keys)


def suite_rollout(env, reset_key, step_keys, actions, names):
    """The same with jumanji's API: reset(key), step(state, action), and reset(step key)
    where a step is LAST (its observation is then the ended episode's last one)."""

    @jax.jit
    def run(reset_key, step_keys, actions):
        state, first = env.reset(reset_key)

        def body(state, x):
            k, a = x
            state, ts = env.step(state, a)
            restart_state, restart = env.reset(k)
            done = ts.last()
            state = jax.tree.map(lambda r, s: jnp.where(done, r, s), restart_state, state)
            obs = jax.tree.map(
                lambda r, s: jnp.where(done, r, s), restart.observation, ts.observation
            )
            return state, (
                as_dict(obs, names),
                ts.reward,
                done & (ts.discount == 0),
                done & (ts.discount > 0),
                as_dict(ts.observation, names),
            )

        _, steps = jax.lax.scan(body, state, (step_keys, actions))
        return as_dict(first.observation, names), steps

    return run(reset_key, step_keys, actions)


def assert_trees_equal(a, b):
    jax.tree.map(np.testing.assert_array_equal, a, b)


def test_snake_matches_jumanji_through_wall_terminations_and_restarts():
    env, params = suites.make("jumanji:Snake-v1", num_rows=6, num_cols=6)
    assert params is None
    actions = jnp.array([UP] * 12 + [RIGHT] * 12, jnp.int32)
    reset_key, step_keys, (first_obs, out) = rollout(
        env, jax.random.key(3), len(actions), lambda obs, t: actions[t]
    )
    obs, reward, terminated, truncated, final = out
    spec = check_env(env, params)
    assert spec.obs_shape == {"grid": (6, 6, 5), "step_count": (), "action_mask": (4,)}
    assert spec.obs_dtype["action_mask"] == np.bool_ and spec.num_actions == 4
    assert reward.dtype == jnp.float32 and terminated.dtype == truncated.dtype == jnp.bool_

    suite = jumanji.make("Snake-v1", num_rows=6, num_cols=6)
    expected = suite_rollout(suite, reset_key, step_keys, actions, list(spec.obs_shape))
    assert_trees_equal((first_obs, (obs, reward, terminated, truncated, final)), expected)

    # Running into a wall terminates (at least twice on 6 rows going up 12 times); the
    # next observation starts a new episode, the final one is the ended episode's last.
    ends = np.flatnonzero(terminated)
    assert len(ends) >= 3 and not truncated.any()
    assert (obs["step_count"][ends] == 0).all() and (final["step_count"][ends] > 0).all()
    mid = np.flatnonzero(~terminated)
    assert_trees_equal({k: v[mid] for k, v in obs.items()}, {k: v[mid] for k, v in final.items()})
    # Snake's reset is random: each episode starts from another snake and fruit.
    starts = [first_obs["grid"], *obs["grid"][ends]]
    assert all(not np.array_equal(a, b) for i, a in enumerate(starts) for b in starts[i + 1 :])


def test_a_batch_of_envs_restarts_each_as_it_would_alone():
    """Under vmap the auto-reset gathers the envs that ended (autoreset.reset_where); each
    env's steps, restarts included, equal that env stepped alone."""
    env, _ = suites.make("jumanji:Snake-v1", num_rows=6, num_cols=6)

    def one(key):
        _, state = env.reset(key, None)

        def body(state, t):
            # Up 5 times, then right 5 times: into a wall within 6 steps, over and over.
            action = jnp.where(t % 10 < 5, UP, RIGHT).astype(jnp.int32)
            obs, state, reward, terminated, *_ = env.step(
                jax.random.fold_in(key, t), state, action, None
            )
            return state, (obs, reward, terminated)

        return jax.lax.scan(body, state, jnp.arange(30))[1]

    keys = jax.random.split(jax.random.key(7), 8)
    batch = jax.jit(jax.vmap(one))(keys)
    assert 8 <= int(batch[2].sum()) < 8 * 30
    alone = jax.jit(one)
    for i, key in enumerate(keys):
        assert_trees_equal(jax.tree.map(lambda x: x[i], batch), alone(key))


class TruncatingSnake(Snake):
    """Snake whose time limit is a truncation (discount 1), as a suite may mark one:
    jumanji 1.1's own envs end at their time limit with discount 0."""

    def step(self, state, action):
        state, ts = super().step(state, action)
        limit = state.step_count >= self.time_limit
        return state, ts.replace(discount=jnp.where(limit, jnp.ones_like(ts.discount), ts.discount))


@pytest.fixture
def truncating_snake(monkeypatch):
    monkeypatch.setitem(
        registration._REGISTRY,
        "TruncatingSnake-v0",
        registration.EnvSpec(id="TruncatingSnake-v0", entry_point=f"{__name__}:TruncatingSnake"),
    )
    return "jumanji:TruncatingSnake-v0"


@pytest.mark.parametrize("name", ["jumanji:Snake-v1", "truncating"])
def test_time_limit_ends_as_the_suite_marks_it(name, truncating_snake):
    """Snake-v1's time limit is a termination (discount 0, jumanji 1.1); a LAST step with
    discount 1 is a truncation. Either way the final observation is the limit's."""
    env, _ = suites.make(truncating_snake if name == "truncating" else name, time_limit=3)

    def legal(obs, t):  # the first legal move: never into a wall
        return jnp.argmax(obs["action_mask"]).astype(jnp.int32)

    _, _, (_, (obs, _, terminated, truncated, final)) = rollout(env, jax.random.key(0), 7, legal)
    ended = truncated if name == "truncating" else terminated
    assert ended.tolist() == [False, False, True] * 2 + [False]
    assert not (terminated & truncated).any() and not (terminated | truncated)[ended == 0].any()
    assert final["step_count"].tolist() == [1, 2, 3, 1, 2, 3, 1]
    assert obs["step_count"].tolist() == [1, 2, 0, 1, 2, 0, 1]


@pytest.mark.parametrize("env_id, nvec", [("Tetris-v0", (4, 10)), ("Cleaner-v0", (4, 4, 4))])
def test_flattened_action_masks_and_actions_match_the_suite(env_id, nvec):
    """A MultiDiscrete space is one Discrete over joint actions, row-major: Tetris' mask
    already covers every (rotation, column); Cleaner's is per agent (outer product)."""
    env, params = suites.make(f"jumanji:{env_id}")
    n = int(np.prod(nvec))
    assert env.action_space(params).n == n
    mask_space = env.observation_space(params).spaces["action_mask"]
    assert mask_space.shape == (n,) and np.dtype(mask_space.dtype) == np.bool_
    suite = jumanji.make(env_id)
    names = list(env.observation_space(params).spaces)
    key = jax.random.key(1)

    @jax.jit
    def both(key, actions):
        """The adapter's last observation (the final one, were the episode over) and the
        suite's, after two steps; and the suite's masks before each step."""
        _, state = env.reset(key, params)
        suite_state, ts = suite.reset(key)
        masks = []
        for action in actions:
            _, state, *_, info = env.step(key, state, action, params)
            masks.append(ts.observation.action_mask)
            parts = jnp.stack(jnp.unravel_index(action, nvec)).astype(jnp.int32)
            suite_state, ts = suite.step(suite_state, parts)
        return info["final_observation"], masks, ts.observation

    def legal(mask, mixed=False):  # mixed: parts not all equal, so Cleaner's agents part
        return next(
            i
            for i in np.flatnonzero(joint_mask(mask, nvec))
            if not mixed or len(set(np.unravel_index(i, nvec))) > 1
        )

    first = legal(both(key, jnp.zeros(2, jnp.int32))[1][0])
    second = legal(both(key, jnp.array([first, 0], jnp.int32))[1][1], mixed=True)
    obs, _, suite_obs = both(key, jnp.array([first, second], jnp.int32))
    expected = as_dict(suite_obs, names)
    expected["action_mask"] = joint_mask(suite_obs.action_mask, nvec)
    assert expected["action_mask"].any() and not expected["action_mask"].all()
    if env_id == "Cleaner-v0":  # the agents' own masks differ: the outer product is tested
        assert len({tuple(m) for m in np.asarray(suite_obs.action_mask)}) > 1
    assert_trees_equal(obs, expected)


def joint_mask(mask, nvec):
    """The mask over joint actions, written with numpy as an independent check."""
    mask = np.asarray(mask)
    if mask.shape == tuple(nvec):
        return mask.reshape(-1)
    joint = np.ones(nvec, bool)
    for agent, n in enumerate(nvec):
        shape = [1] * len(nvec)
        shape[agent] = n
        joint &= mask[agent, :n].reshape(shape)
    return joint.reshape(-1)


@pytest.mark.parametrize(
    "env_id", ["Snake-v1", "Maze-v0", "Tetris-v0", "Cleaner-v0", "RubiksCube-v0", "Knapsack-v1"]
)
def test_observations_have_their_declared_shapes_and_dtypes(env_id):
    """check_env traces reset and step and compares every key of the dict observation
    (reset, step and final) with the declared spaces."""
    env, params = suites.make(f"jumanji:{env_id}")
    spec = check_env(env, params)
    assert isinstance(spec.obs_shape, dict) and spec.discrete
    if "action_mask" in spec.obs_shape:  # one bool per (joint) action
        assert spec.obs_shape["action_mask"] == (spec.num_actions,)
        assert spec.obs_dtype["action_mask"] == np.bool_
    if env_id == "Maze-v0":  # nested Position fields are flattened with dotted names
        assert {"agent_position.row", "target_position.col"} <= set(spec.obs_shape)
    if env_id == "RubiksCube-v0":  # no mask in the suite, none here
        assert "action_mask" not in spec.obs_shape and spec.num_actions == 18


def one_line_error(error_type, *args, **kwargs):
    with pytest.raises(error_type) as info:
        suites.make(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_unsupported_envs_are_one_line_config_errors():
    assert "one per agent" in one_line_error(ConfigError, "jumanji:LevelBasedForaging-v0")
    assert "joint actions" in one_line_error(ConfigError, "jumanji:JobShop-v0")
    assert "BoundedArray" in one_line_error(ConfigError, "jumanji:MultiCVRP-v0")


def test_sokoban_offline_is_a_one_line_user_error(monkeypatch, tmp_path):
    """Sokoban's constructor downloads its levels from the Hugging Face Hub: offline (forced
    here, with an empty cache) that is a one-line UserError at make."""
    hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setattr(hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub.constants, "HF_HUB_CACHE", str(tmp_path))
    message = one_line_error(UserError, "jumanji:Sokoban-v0")
    assert "cannot build env jumanji:Sokoban-v0" in message and "offline" in message


@pytest.mark.parametrize(
    "env_id, kwargs, action, suite_action",
    [
        ("Snake-v1", {"num_rows": 6, "num_cols": 6}, RIGHT, RIGHT),
        ("Tetris-v0", {}, 13, [1, 3]),  # joint index 13 of (4 rotations, 10 columns)
    ],
)
@pytest.mark.slow
def test_direct_is_the_suites_own_reset_and_step(env_id, kwargs, action, suite_action):
    """`direct` (bench's adapter-overhead baseline): jumanji's reset and the step of its
    own AutoResetWrapper for one env under jit, our joint action split into jumanji's."""
    from jumanji.wrappers import AutoResetWrapper

    reset, step = suites.adapter("jumanji").direct(env_id, **kwargs)
    key = jax.random.key(0)
    state = jax.jit(step)(key, jax.jit(reset)(key), jnp.int32(action))
    suite = AutoResetWrapper(jumanji.make(env_id, **kwargs), next_obs_in_extras=True)
    expected, _ = suite.step(suite.reset(key)[0], jnp.asarray(suite_action, jnp.int32))
    assert type(state) is type(expected)
    assert_trees_equal(jax.random.key_data(state.key), jax.random.key_data(expected.key))
    assert_trees_equal(state.replace(key=None), expected.replace(key=None))


@pytest.mark.slow
def test_ppo_learns_snake_by_name_respecting_the_action_mask():
    """`env.name=jumanji:Snake-v1` on a 6x6 board with a 100-step limit, 4 seeds in one
    program, 131,072 steps: the small board puts fruit within reach of a short random
    walk, so the reward is dense enough for PPO to learn within the budget, and the limit
    ends episodes often enough to measure them. At this budget the seeds clear 4x random
    play with margin under either PRNG.

    The yardstick is uniformly random LEGAL moves (the mask forbids walls and the body,
    as it does for the policy), a fruit or two per episode; the seeds must reach 4x it."""
    env, params = suites.make("jumanji:Snake-v1", num_rows=6, num_cols=6, time_limit=100)
    random, episodes = random_return(env, params, num_envs=256, steps=1024)
    assert episodes >= 256, episodes
    assert 1.0 < random < 2.5, random
    config = jaxrl_async.load_config(
        "ppo_cartpole",
        [
            "env.name=jumanji:Snake-v1",
            "env.kwargs.num_rows=6",
            "env.kwargs.num_cols=6",
            "env.kwargs.time_limit=100",
            "env.num_envs=16",
            "pipeline.rollout_len=64",
            "agent.learning_rate=1e-3",
            "train.total_steps=131072",
            "train.log_every=16384",
            "train.num_seeds=4",
            "train.progress=false",
        ],
    )
    assert_learns(jaxrl_async.train(config), 4 * random, min_passing=3)
