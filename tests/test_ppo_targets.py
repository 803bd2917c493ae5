"""PPO's targets, whose value pass runs the critic on x_t and reads V(x'_t) from it where
the episode went on, against GAE by the forward loop with the critic run on every x'_t:
episodes that terminate or truncate anywhere, before the last step or at it, or none."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_async.agents.ppo import PPOConfig, make_ppo
from jaxrl_async.envs.spec import EnvSpec
from jaxrl_async.types import BuildContext, Transition
from tests.helpers.probe_envs import walk_rollout

SPEC = EnvSpec((3,), np.dtype(np.float32), True, 3, (), np.dtype(np.int32))
T, B = 11, 4


def trajectory(seed: int, ends: str) -> Transition:
    """Random steps whose next observation is the next step's observation except where an
    episode ended (`ends`: where the episodes end), which gets a final observation of
    its own."""
    rng = np.random.default_rng(seed)
    terminated, truncated = np.zeros((T, B), bool), np.zeros((T, B), bool)
    if ends == "inside":  # a truncation before the last step (the critic sees every x')
        truncated[3, 0], truncated[7, 2], terminated[5, 1], terminated[3, 3] = (True,) * 4
        truncated[5, 1] = True  # both at once: the termination wins
    elif ends == "terminations and a last-step truncation":
        terminated[2, 0], terminated[8, 3], truncated[T - 1, 1] = True, True, True
    obs = rng.normal(size=(T + 1, B, 3)).astype(np.float32)
    next_obs = obs[1:].copy()
    ended = terminated | truncated
    next_obs[ended] = rng.normal(size=(int(ended.sum()), 3)).astype(np.float32)
    return Transition(
        obs=jnp.asarray(obs[:-1]),
        action=jnp.asarray(rng.integers(3, size=(T, B)), jnp.int32),
        reward=jnp.asarray(rng.normal(size=(T, B)), jnp.float32),
        terminated=jnp.asarray(terminated),
        truncated=jnp.asarray(truncated),
        next_obs=jnp.asarray(next_obs),
        extras={"log_prob": jnp.zeros((T, B), jnp.float32)},
        version=jnp.zeros((T, B), jnp.int32),
    )


def forward_gae(v, v_next, traj: Transition, gamma: float, lambda_: float) -> np.ndarray:
    """GAE backwards over time: a termination stops, a truncation bootstraps from
    V(final observation) and cuts the trace, the last step bootstraps from V(x'_T-1)."""
    reward, term, trunc = (np.asarray(x) for x in (traj.reward, traj.terminated, traj.truncated))
    advantage = np.zeros((T, B))
    for b in range(B):
        following = 0.0
        for t in reversed(range(T)):
            if term[t, b]:
                delta, following = reward[t, b] - v[t, b], 0.0
            elif trunc[t, b] or t == T - 1:
                delta, following = reward[t, b] + gamma * v_next[t, b] - v[t, b], 0.0
            else:
                delta = reward[t, b] + gamma * v[t + 1, b] - v[t, b]
            following = delta + gamma * lambda_ * following
            advantage[t, b] = following
    return advantage


@pytest.mark.parametrize("ends", ["inside", "terminations and a last-step truncation", "none"])
def test_ppo_targets_equal_gae_with_the_critic_on_every_final_observation(ends):
    config = PPOConfig(hidden_sizes=(16,))
    agent = make_ppo(config, BuildContext(SPEC, B, T, 1))
    state = agent.init(jax.random.key(0))
    traj = trajectory(1, ends)
    targets = jax.jit(agent.targets)(state, traj)
    # the critic on every x'_t: the values of a trajectory observing them
    v_next = np.asarray(agent.targets(state, traj._replace(obs=traj.next_obs))["value"])
    v = np.asarray(targets["value"])
    expected = forward_gae(v, v_next, traj, config.gamma, config.gae_lambda)
    np.testing.assert_allclose(np.asarray(targets["advantage"]), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(targets["target"]), expected + v, rtol=1e-5, atol=1e-5)


def test_a_normalised_rollout_records_x_prime_as_the_next_steps_observation():
    """What the value pass rests on: where an episode went on, the JAX rollout's x'_t is
    x_t+1 bit for bit, also seen through running statistics that move every step (a host
    actor's are a round's: tests/test_host_obs_norm.py)."""
    _, _, traj = walk_rollout(lambda ctx: make_ppo(PPOConfig(hidden_sizes=(8,)), ctx), 16, 4, True)
    obs, next_obs = np.asarray(traj.obs), np.asarray(traj.next_obs)
    went_on = ~np.asarray(traj.terminated | traj.truncated)[:-1]
    assert went_on.any() and not went_on.all()
    assert not np.allclose(obs, np.round(obs))  # normalised: not the walk's integer positions
    np.testing.assert_array_equal(next_obs[:-1][went_on], obs[1:][went_on])
