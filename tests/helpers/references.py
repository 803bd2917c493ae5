"""Plain-Python and float64 numpy references that more than one test file checks against."""

import jax
import numpy as np


def q_lambda_reference(rewards, terminated, truncated, next_q, gamma, lambda_):
    """Plain Python, the forward view: for each step t, the lambda-weighted mix of its
    n-step Q-learning returns

      G_t^(n) = sum_{k<n} gamma^k r_{t+k} + gamma^n max_a next_q[t+n-1][a],

    over n = 1..N, where step t+N-1 is the first that ends the episode or the rollout's
    last step: G_t = (1-lambda) sum_{n<N} lambda^(n-1) G_t^(n) + lambda^(N-1) G_t^(N).
    A termination at t+N-1 drops the bootstrap of G_t^(N) (and wins over a truncation at
    the same step); a truncation keeps it, from max_a Q of the final observation,
    next_q[t+N-1]; so does the rollout's end. next_q [T][B][A] are the Q-values of the
    observation after each step, before any auto-reset.
    """
    T, B = len(rewards), len(rewards[0])
    out = np.zeros((T, B))
    for b in range(B):
        for t in range(T):
            end = t
            while not (terminated[end][b] or truncated[end][b]) and end < T - 1:
                end += 1
            N = end - t + 1
            total, discounted_rewards = 0.0, 0.0
            for n in range(1, N + 1):
                discounted_rewards += gamma ** (n - 1) * rewards[t + n - 1][b]
                last = t + n - 1
                bootstrap = (
                    0.0 if (n == N and terminated[last][b]) else gamma**n * max(next_q[last][b])
                )
                weight = (1 - lambda_) * lambda_ ** (n - 1) if n < N else lambda_ ** (N - 1)
                total += weight * (discounted_rewards + bootstrap)
            out[t, b] = total
    return out


def mlp_np(layers, x):
    """Dense layers [(kernel, bias)], relu between them, none after the last."""
    for i, (kernel, bias) in enumerate(layers):
        x = x @ np.asarray(kernel, np.float64) + np.asarray(bias, np.float64)
        if i < len(layers) - 1:
            x = np.maximum(x, 0.0)
    return x


def dense_layers(tree, depth):
    return [
        (tree["MLP_0"][f"Dense_{i}"]["kernel"], tree["MLP_0"][f"Dense_{i}"]["bias"])
        for i in range(depth)
    ] + [(tree["Dense_0"]["kernel"], tree["Dense_0"]["bias"])]


def critics_np(params, obs, action, depth):
    """[2, b]: both members of the stacked ensemble."""
    tree = params["params"]["VmapQValue_0"]
    x = np.concatenate([np.asarray(obs, np.float64), np.asarray(action, np.float64)], -1)
    members = [jax.tree.map(lambda v, i=i: v[i], tree) for i in range(2)]
    return np.stack([mlp_np(dense_layers(m, depth), x)[:, 0] for m in members])


def pendulum_spec():
    """The EnvSpec of gymnax's Pendulum-v1, the continuous-control agents' test env."""
    from jaxrl_async.envs import make, spec_of

    env, params = make("Pendulum-v1")
    return spec_of(env, params)


def pendulum_sample(b=32, seed=0, discount=0.9):
    """A Pendulum-shaped replay batch drawn with numpy (no eager JAX ops to compile):
    actions in [-2, 2], every fourth discount 0, non-uniform importance weights."""
    from jaxrl_async.types import NStepTransition, Sample

    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(b, 3)).astype(np.float32)
    items = NStepTransition(
        obs=obs,
        action=rng.uniform(-2.0, 2.0, (b, 1)).astype(np.float32),
        reward=rng.normal(size=b).astype(np.float32),
        discount=np.where(np.arange(b) % 4 == 0, 0.0, discount).astype(np.float32),
        next_obs=(obs + 0.1 * rng.normal(size=(b, 3))).astype(np.float32),
    )
    return Sample(
        items,
        np.arange(b, dtype=np.int32),
        np.full(b, 1.0 / b, np.float32),
        np.linspace(0.2, 1.0, b).astype(np.float32),
    )
