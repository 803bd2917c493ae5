#!/usr/bin/env python
"""The random-policy returns of jaxrl_async/analysis/reference_scores.py's table, measured.

    python scripts/reference_scores.py                 # every env of the table
    python scripts/reference_scores.py --episodes 1000 --envs CartPole-v1

Plays `--episodes` first episodes of uniformly random actions per env (vmapped, one
compiled program per env; the env's own time limit ends them) and prints each env's mean
return with its standard error next to the table's value.
"""

from __future__ import annotations

import argparse
import sys


def random_returns(name: str, episodes: int, seed: int, max_steps: int = 10_000):
    """[episodes] returns of the first episode of `episodes` envs under random actions."""
    import jax
    import jax.numpy as jnp

    from jaxrl_async.envs import make

    env, params = make(name)
    space = env.action_space(params)

    def episode(key):
        key, reset_key = jax.random.split(key)
        _, state = env.reset(reset_key, params)

        def step(carry):
            state, key, total, done, t = carry
            key, act_key, step_key = jax.random.split(key, 3)
            action = space.sample(act_key)
            _, state, reward, terminated, truncated, _ = env.step(step_key, state, action, params)
            total = total + jnp.where(done, 0.0, reward)
            return state, key, total, done | terminated | truncated, t + 1

        carry = (state, key, jnp.float32(0.0), jnp.bool_(False), 0)
        carry = jax.lax.while_loop(lambda c: ~c[3] & (c[4] < max_steps), step, carry)
        return carry[2]

    keys = jax.random.split(jax.random.key(seed), episodes)
    return jax.device_get(jax.jit(jax.vmap(episode))(keys))


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    from jaxrl_async.analysis.reference_scores import REFERENCE

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--envs", default="", help="comma-separated env names (default: all)")
    args = parser.parse_args(argv)
    names = [n for n in args.envs.split(",") if n] or list(REFERENCE)
    unknown = [n for n in names if n not in REFERENCE]
    if unknown:
        parser.error(f"not in the table: {', '.join(unknown)}")
    for name in names:
        returns = np.asarray(random_returns(name.split(":")[-1], args.episodes, args.seed))
        error = returns.std(ddof=1) / np.sqrt(len(returns))
        print(
            f"{name}: random {returns.mean():.2f} ± {error:.2f} (standard error, "
            f"{len(returns)} episodes); table {REFERENCE[name].random}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
