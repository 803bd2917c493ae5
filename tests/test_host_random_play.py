"""Random play on host envs (`host/random_play.py`), the baseline results.py draws under
a host config's curves."""

import numpy as np
import pytest

import jaxrl_async
from jaxrl_async.envs.spec import EnvSpec
from jaxrl_async.host.random_play import random_actions, random_returns
from jaxrl_async.reference_scores import REFERENCE

pytest.importorskip("gymnasium")


def test_cartpole_random_play_is_the_reference_tables():
    config = jaxrl_async.load_config("ppo_gymnasium_cartpole").env
    returns = random_returns(config, 400, seed=3)
    assert len(returns) == 400  # 50 from each of the 8 envs
    error = returns.std(ddof=1) / np.sqrt(len(returns))
    assert abs(returns.mean() - REFERENCE["gymnasium:CartPole-v1"].random) < 5 * error
    np.testing.assert_array_equal(returns, random_returns(config, 400, seed=3))
    assert not np.array_equal(returns, random_returns(config, 400, seed=4))


def test_episodes_round_up_to_a_whole_number_per_env():
    config = jaxrl_async.load_config("ppo_gymnasium_cartpole").env
    assert len(random_returns(config, 9)) == 16


def test_actions_cover_the_action_space():
    rng = np.random.default_rng(0)
    discrete = EnvSpec((4,), np.float32, True, 3, (), np.int32)
    actions = random_actions(rng, discrete, 3000)
    assert actions.dtype == np.int32 and set(actions.tolist()) == {0, 1, 2}
    box = EnvSpec((3,), np.float32, False, 0, (2,), np.float32, (-2.0, 0.0), (2.0, 1.0))
    actions = random_actions(rng, box, 3000)
    assert actions.shape == (3000, 2) and actions.dtype == np.float32
    assert np.all(actions >= [-2, 0]) and np.all(actions <= [2, 1])
    assert actions[:, 0].min() < -1.9 and actions[:, 1].max() > 0.95
