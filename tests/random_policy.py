"""The yardstick a learning test beats: the mean episode return of uniformly random legal
actions, measured on the env itself in one jitted loop."""

import jax
import jax.numpy as jnp

from jaxrl_async.envs import make_batched


def random_return(env, params, num_envs: int = 256, steps: int = 512, seed: int = 0) -> float:
    """Mean return of the episodes that end in `steps` steps of `num_envs` envs taking
    uniformly random actions, among the legal ones where the observation has an
    "action_mask" (a row that allows none allows all, as the policies do)."""
    batched = make_batched(env)
    num_actions = env.action_space(params).n

    def act(key, obs):
        mask = obs["action_mask"] if isinstance(obs, dict) and "action_mask" in obs else None
        if mask is None:
            return jax.random.randint(key, (num_envs,), 0, num_actions)
        mask = mask | ~mask.any(-1, keepdims=True)
        return jax.random.categorical(key, jnp.where(mask, 0.0, -jnp.inf))

    @jax.jit
    def run(key):
        reset_key, key = jax.random.split(key)
        obs, state = batched.reset(jax.random.split(reset_key, num_envs), params)

        def step(carry, key):
            obs, state = carry
            act_key, step_key = jax.random.split(key)
            obs, state, _, _, _, info = batched.step(
                jax.random.split(step_key, num_envs), state, act(act_key, obs), params)
            return (obs, state), (info["episode_return"].sum(), info["episode_done"].sum())

        _, (returns, ends) = jax.lax.scan(step, (obs, state), jax.random.split(key, steps))
        return returns.sum() / jnp.maximum(ends.sum(), 1), ends.sum()

    mean, ends = run(jax.random.key(seed))
    assert int(ends) >= num_envs, f"only {int(ends)} episodes ended: too few to measure"
    return float(mean)
