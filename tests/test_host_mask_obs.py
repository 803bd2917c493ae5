"""`env.mask_obs` on host envs (`by_name.make_run_env`): the run's envs, the actors' and the
evaluation's, zero the listed entries of every observation (final ones included) as the
JAX envs' `MaskObservation` does, for an agent built for the same spec; the refusals are
the JAX env's lines; a masked run trains."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.config.loader import load_config
from jaxrl_async.envs.wrappers import MaskObservation
from jaxrl_async.errors import ConfigError
from jaxrl_async.evaluation.host import make_eval_env
from jaxrl_async.host import make_actor_envs, make_host_env, train_host
from jaxrl_async.host.by_name import make_run_env
from tests.helpers import host_envs  # noqa: F401  (registers the corridor envs)
from tests.helpers.host_runs import CORRIDOR, SMALL, bounded, dqn_config

MASKED = [f"env.name={CORRIDOR}", "env.mask_obs=[1]", *SMALL]


def jax_masked(obs: np.ndarray, indices) -> np.ndarray:
    """`obs` through the JAX envs' wrapper's own mask."""
    return np.asarray(MaskObservation(None, indices)._mask(jnp.asarray(obs)))


def test_host_observations_are_masked_as_the_jax_wrapper_masks_them():
    """The same observations, unmasked from one env and masked from another reset from
    the same seed: the masked ones are the JAX wrapper's mask of the raw ones, final
    observations too, and the spec (what the agent is built for) is the unmasked env's."""
    config = load_config("ppo_cartpole", MASKED)
    raw_env = make_host_env(CORRIDOR, 3)
    masked_env = make_run_env(config.env, 3)
    try:
        assert masked_env.spec == raw_env.spec
        raw, masked = raw_env.reset(5), masked_env.reset(5)
        np.testing.assert_array_equal(masked, jax_masked(raw, (1,)))
        ended, hidden = 0, 0.0
        for t in range(8):
            action = np.full(3, t % 2, np.int64)
            a, b = raw_env.step(action), masked_env.step(action)
            hidden += float(np.abs(a.obs[:, 1]).sum())
            np.testing.assert_array_equal(b.obs, jax_masked(a.obs, (1,)))
            np.testing.assert_array_equal(b.final_obs, jax_masked(a.final_obs, (1,)))
            np.testing.assert_array_equal(b.reward, a.reward)
            ended += int((a.terminated | a.truncated).sum())
        assert hidden > 0  # the steps taken: something was masked
        assert ended > 0  # final observations that differ from the next ones were masked
    finally:
        raw_env.close()
        masked_env.close()


def test_the_actors_and_the_evaluations_envs_are_masked():
    config = load_config("ppo_cartpole", [*MASKED, "pipeline.actor_threads=2"])
    envs = [*make_actor_envs(config), make_eval_env(config)]
    try:
        assert [env.mask for env in envs] == [(1,)] * 3
    finally:
        for env in envs:
            env.close()


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["env.mask_obs=[2]"], r"env.mask_obs=\[2\]: index 2 is out of range"),
        (["env.kwargs={dict_obs: true}"], "needs an array observation"),
    ],
)
def test_a_mask_the_observation_cannot_take_is_refused_in_one_line(overrides, match):
    config = load_config("ppo_cartpole", [*MASKED, *overrides])
    with pytest.raises(ConfigError, match=match) as caught:
        make_actor_envs(config)
    assert "\n" not in str(caught.value)


def test_a_masked_dqn_run_trains_on_masked_observations():
    """The replay holds only masked observations (the steps taken zeroed, the position
    kept), and the run learns from them."""
    result = bounded(lambda: train_host(dqn_config("env.mask_obs=[1]")), 120.0)
    replay = result["replay"].replay
    size = int(replay.ring.size)
    items = jax.tree.map(lambda x: np.asarray(x)[:size], replay.ring.items)
    assert size == 10 * 16 - 2 * 4 and result["updates"] == 9
    assert not items.obs[:, 1].any() and not items.next_obs[:, 1].any()
    assert items.obs[:, 0].any()
    assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(result["params"]))


def test_a_masked_ppo_run_trains_with_normalised_observations():
    """Masked, then normalised (as a JAX env's wrappers stack): the statistics see the
    masked entry as zeros, every observation counted."""
    config = load_config(
        "ppo_cartpole", [*MASKED, "env.normalize_obs=true", "train.total_steps=96"]
    )
    result = bounded(lambda: train_host(config), 120.0)
    stats = result["obs_stats"]
    assert result["updates"] == config.num_updates
    assert stats.mean[1] == 0.0 and stats.var[1] < 1e-4 and stats.mean[0] > 0.0
    assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(result["params"]))
