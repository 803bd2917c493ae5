"""Random play on host envs (`host/random_play.py`), the baseline results.py draws under
a host config's curves."""

import numpy as np
import pytest

import jaxrl_async
from jaxrl_async.analysis.reference_scores import REFERENCE
from jaxrl_async.host.random_play import random_returns

pytest.importorskip("gymnasium")


def cartpole_on(envs: int):
    return jaxrl_async.load_config("ppo_gymnasium_cartpole", [f"env.num_envs={envs}"]).env


def test_cartpole_random_play_is_the_reference_tables():
    config = cartpole_on(8)
    returns = random_returns(config, 400, seed=3)
    assert len(returns) == 400  # 50 from each of the 8 envs
    error = returns.std(ddof=1) / np.sqrt(len(returns))
    assert abs(returns.mean() - REFERENCE["gymnasium:CartPole-v1"].random) < 5 * error
    np.testing.assert_array_equal(returns, random_returns(config, 400, seed=3))
    assert not np.array_equal(returns, random_returns(config, 400, seed=4))


def test_episodes_round_up_to_a_whole_number_per_env():
    assert len(random_returns(cartpole_on(8), 9)) == 16


def test_vector_actions_play_within_their_bounds():
    """A Box action space: the vector env's own samples, in the spec's dtype; Pendulum's
    reward is never positive and random play stays far from its optimum (0)."""
    config = jaxrl_async.load_config("ppo_halfcheetah", ["env.name=gymnasium:Pendulum-v1"]).env
    returns = random_returns(config, 16, seed=1)
    assert len(returns) == 16 and np.all(returns < -100)
