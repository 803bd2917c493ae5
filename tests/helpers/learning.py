"""Assertions for end-to-end learning tests over several seeds trained in one program.

A learning test never rests on one seed: different CPUs give different float bits, and
one seed that happens to solve says nothing about the configuration. Each test trains
`train.num_seeds` seeds together and asserts on the distribution of their final returns.
"""

import numpy as np


def seed_returns(result) -> np.ndarray:
    """The final episode return of every seed of a `train.num_seeds` run."""
    returns = result.summary.get("final_return_seeds") or [result.summary["final_return"]]
    return np.asarray([np.nan if r is None else r for r in returns], np.float64)


def curves(result) -> np.ndarray:
    """Per-seed learning curves [seeds, log points] (NaN where no episode ended)."""
    n = result.summary.get("num_seeds", 1)
    if n == 1:
        return np.asarray(result.metrics["episode_return"])[None]
    return np.stack([np.asarray(result.metrics[f"episode_return/seed{k}"]) for k in range(n)])


def assert_learns(result, threshold: float, min_passing: int, last: int = 1):
    """The median seed reaches `threshold` and at least `min_passing` seeds do, on each
    seed's final return or, with `last` > 1, on the mean of its last `last` log points
    (for agents whose curves swing from one log point to the next)."""
    if last == 1:
        returns, what = seed_returns(result), "final returns"
    else:
        returns = np.nanmean(curves(result)[:, -last:], axis=1)
        what = f"means of the last {last} log points"
    passing = int(np.sum(returns >= threshold))
    message = (
        f"{what} per seed {np.round(returns, 1).tolist()}: {passing} of "
        f"{len(returns)} reach {threshold} (need {min_passing} and the median)"
    )
    assert passing >= min_passing and np.nanmedian(returns) >= threshold, message
    return returns


def random_return(
    env, params, num_envs: int = 64, steps: int = 1000, seed: int = 0
) -> tuple[float, int]:
    """(mean return, episodes) of the episodes that uniformly random actions complete in
    `steps` steps of `num_envs` envs: the baseline a learning test must clearly beat,
    taken on the batched env the trainer steps (episode statistics included), in one
    jitted scan. Where the observation has an "action_mask", the actions are uniform over
    the legal ones (a row that allows none allows all, as the policies do)."""
    import jax
    import jax.numpy as jnp

    from jaxrl_async.envs import make_batched

    batched = make_batched(env)
    space = env.action_space(params)
    sample = jax.vmap(space.sample)

    def act(key, obs):
        if not (isinstance(obs, dict) and "action_mask" in obs):
            return sample(jax.random.split(key, num_envs))
        mask = obs["action_mask"]
        mask = mask | ~mask.any(-1, keepdims=True)
        return jax.random.categorical(key, jnp.where(mask, 0.0, -jnp.inf))

    @jax.jit
    def run(key):
        key, reset_key = jax.random.split(key)
        obs, state = batched.reset(jax.random.split(reset_key, num_envs), params)

        def step(carry, key):
            obs, state = carry
            act_key, step_key = jax.random.split(key)
            obs, state, _, _, _, info = batched.step(
                jax.random.split(step_key, num_envs), state, act(act_key, obs), params
            )
            done = info["episode_done"]
            return (obs, state), (
                jnp.sum(jnp.where(done, info["episode_return"], 0.0)),
                jnp.sum(done),
            )

        _, (total, count) = jax.lax.scan(step, (obs, state), jax.random.split(key, steps))
        return total.sum(), count.sum()

    total, count = jax.device_get(run(jax.random.key(seed)))
    return float(total) / max(int(count), 1), int(count)
