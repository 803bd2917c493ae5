#!/usr/bin/env python
"""A plain single-threaded Gymnasium PPO loop against the trainer's host executor, at the
same hyperparameters, interleaved.

The baseline is PPO written the usual way: step a Gymnasium sync vector env, act with a
jitted policy, and after every rollout of T steps run one jitted update (GAE, then
epochs x minibatches of shuffled steps, clipped policy and value losses, entropy bonus,
global-norm clipping, Adam annealed to 0), one thread, no queue, no lag. Separate actor
and critic MLPs with orthogonal init; a categorical policy for a discrete action space,
a Gaussian with a state-independent log-std (actions clipped to the bounds in the env
step) for a box. Its hyperparameters are read from the trainer's config, so both train
the same maths; textbook simplifications against the trainer: a truncation is treated as
terminal (the trainer bootstraps from V of the final observation), the baseline uses
JAX's default PRNG, and under env.normalize_obs Gymnasium's NormalizeObservation wrapper
normalises each env's observations by that env's statistics.

    python scripts/bench_host_baseline.py                                 # CartPole
    python scripts/bench_host_baseline.py --config ppo_gymnasium_cartpole --steps 131072
    python scripts/bench_host_baseline.py --config ppo_halfcheetah --lags 0,1 --json out.json
    python scripts/bench_host_baseline.py --config ppo_halfcheetah --steps 1000000 --lags 1 \
        --seed-per-repeat                 # the whole budget: returns over seeds 0, 1, 2

`--baseline-override` changes the plain loop's config alone: a first script's settings
(one env, 2,048-step rollouts, 10 epochs of 32 minibatches of 64) against the trainer
as shipped:

    python scripts/bench_host_baseline.py --config ppo_halfcheetah --lags 1 \
        --baseline-override env.num_envs=1 --baseline-override pipeline.rollout_len=2048

SPS counts the env steps after the first rollout and update (whose compiles both sides
leave out); the final return is the mean raw return of the last episodes on both sides,
as many as the trainer's config has envs. Each round runs the baseline, then the
trainer at each lag, all with the config's seed, or with seed r in round r under
--seed-per-repeat. Medians with min and
max over the rounds; `python scripts/harness.py table` puts --json's table into
docs/performance.json.
"""

from __future__ import annotations

import sys
import time

import flax.linen as nn
import harness  # beside this script in scripts/
import jax
import jax.numpy as jnp
import numpy as np
import optax
from bench_host import train_once

import jaxrl_async


class MLP(nn.Module):
    hidden: tuple[int, ...]
    out: int
    activation: str
    out_scale: float

    @nn.compact
    def __call__(self, x):
        act = {"relu": nn.relu, "tanh": nn.tanh}[self.activation]
        init = nn.initializers.orthogonal
        for h in self.hidden:
            x = act(nn.Dense(h, kernel_init=init(np.sqrt(2)))(x))
        return nn.Dense(self.out, kernel_init=init(self.out_scale))(x)


def make_env(config):
    import gymnasium

    name = config.env.name.split(":", 1)[1]
    # The usual way: Gymnasium's own running statistics, one per env (its vector wrapper
    # refuses same-step autoreset).
    wrappers = [gymnasium.wrappers.NormalizeObservation] if config.env.normalize_obs else []
    return gymnasium.make_vec(
        name,
        num_envs=config.env.num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP},
        wrappers=wrappers,
    )


def make_ppo(config, obs_dim: int, action_space):
    """(init, act, update) of PPO at `config.agent`'s hyperparameters."""
    a = config.agent
    discrete = hasattr(action_space, "n")
    n_out = int(action_space.n) if discrete else int(np.prod(action_space.shape))
    actor = MLP(tuple(a.hidden_sizes), n_out, a.activation, 0.01)
    critic = MLP(tuple(a.hidden_sizes), 1, a.activation, 1.0)
    batch = config.env.num_envs * config.pipeline.rollout_len
    steps = config.num_updates * a.num_epochs * a.num_minibatches
    lr = optax.linear_schedule(a.learning_rate, 0.0, steps) if a.anneal_lr else a.learning_rate
    tx = optax.chain(optax.clip_by_global_norm(a.max_grad_norm), optax.adam(lr, eps=a.adam_eps))

    def dist(params, obs):
        out = actor.apply(params["actor"], obs)
        if discrete:
            return jax.nn.log_softmax(out), None
        return out, params["log_std"]

    def log_prob(params, obs, action):
        mean, log_std = dist(params, obs)
        if discrete:
            return jnp.take_along_axis(mean, action[:, None], -1)[:, 0]
        z = (action - mean) / jnp.exp(log_std)
        return (-0.5 * z**2 - log_std - 0.5 * jnp.log(2 * jnp.pi)).sum(-1)

    def entropy(params, obs):
        mean, log_std = dist(params, obs)
        if discrete:
            return -(jnp.exp(mean) * mean).sum(-1)
        return jnp.broadcast_to((log_std + 0.5 * jnp.log(2 * jnp.pi * jnp.e)).sum(), mean.shape[:1])

    def init(key):
        k1, k2 = jax.random.split(key)
        obs = jnp.zeros((1, obs_dim))
        params = {"actor": actor.init(k1, obs), "critic": critic.init(k2, obs)}
        if not discrete:
            params["log_std"] = jnp.zeros(n_out)
        return params, tx.init(params)

    @jax.jit
    def act(params, obs, key):
        mean, log_std = dist(params, obs)
        if discrete:
            action = jax.random.categorical(key, mean)
        else:
            action = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
        value = critic.apply(params["critic"], obs)[:, 0]
        return action, log_prob(params, obs, action), value

    def loss(params, mb):
        ratio = jnp.exp(log_prob(params, mb["obs"], mb["action"]) - mb["log_prob"])
        adv = mb["adv"]
        if a.normalize_advantages:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        clip = a.clip_eps
        pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip, 1 + clip) * adv).mean()
        value = critic.apply(params["critic"], mb["obs"])[:, 0]
        v_loss = jnp.square(value - mb["target"])
        if a.clip_value:
            clipped = mb["value"] + jnp.clip(value - mb["value"], -clip, clip)
            v_loss = jnp.maximum(v_loss, jnp.square(clipped - mb["target"]))
        return pg + a.vf_coef * 0.5 * v_loss.mean() - a.ent_coef * entropy(params, mb["obs"]).mean()

    @jax.jit
    def update(params, opt_state, traj, last_value, key):
        reward = traj["reward"] * a.reward_scale
        notdone = 1.0 - traj["done"]

        def gae_step(carry, x):
            adv, next_value = carry
            value, r, nd = x
            delta = r + a.gamma * nd * next_value - value
            adv = delta + a.gamma * a.gae_lambda * nd * adv
            return (adv, value), adv

        _, adv = jax.lax.scan(
            gae_step,
            (jnp.zeros_like(last_value), last_value),
            (traj["value"], reward, notdone),
            reverse=True,
        )
        data = {k: traj[k] for k in ("obs", "action", "log_prob", "value")}
        data = {**data, "adv": adv, "target": adv + traj["value"]}
        data = jax.tree.map(lambda x: x.reshape(batch, *x.shape[2:]), data)

        def sgd(carry, mb):
            params, opt_state = carry
            grads = jax.grad(loss)(params, mb)
            updates, opt_state = tx.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), None

        def epoch(carry, k):
            perm = jax.random.permutation(k, batch)
            mbs = jax.tree.map(lambda x: x[perm].reshape(a.num_minibatches, -1, *x.shape[1:]), data)
            return jax.lax.scan(sgd, carry, mbs)[0], None

        (params, opt_state), _ = jax.lax.scan(
            epoch, (params, opt_state), jax.random.split(key, a.num_epochs)
        )
        return params, opt_state

    return init, act, critic, update


def run_baseline(config, window: int) -> dict:
    """Train `config` with the plain loop: SPS after the first round, the final return
    (the mean raw return of the last `window` episodes)."""
    env = make_env(config)
    obs, _ = env.reset(seed=config.train.seed)
    obs_dim = int(np.prod(env.single_observation_space.shape))
    space = env.single_action_space
    init, act, critic, update = make_ppo(config, obs_dim, space)
    key = jax.random.key(config.train.seed)
    params, opt_state = init(key)
    low = None if hasattr(space, "n") else (space.low, space.high)
    T, B = config.pipeline.rollout_len, config.env.num_envs
    ep_ret, returns = np.zeros(B), []
    started = None
    for u in range(config.num_updates):
        traj = {k: [] for k in ("obs", "action", "log_prob", "value", "reward", "done")}
        for _ in range(T):
            key, k = jax.random.split(key)
            action, logp, value = jax.device_get(act(params, obs.reshape(B, -1), k))
            step_action = action if low is None else np.clip(action, *low)
            next_obs, reward, term, trunc, _ = env.step(step_action)
            done = term | trunc
            ep_ret += reward
            returns += ep_ret[done].tolist()
            ep_ret[done] = 0.0
            for name, x in (
                ("obs", obs.reshape(B, -1)),
                ("action", action),
                ("log_prob", logp),
                ("value", value),
                ("reward", reward),
                ("done", done),
            ):
                traj[name].append(x)
            obs = next_obs
        batch = {
            k: np.stack(v).astype(np.int32 if k == "action" and low is None else np.float32)
            for k, v in traj.items()
        }
        last_value = critic.apply(params["critic"], obs.reshape(B, -1))[:, 0]
        key, k = jax.random.split(key)
        params, opt_state = update(params, opt_state, batch, last_value, k)
        jax.block_until_ready(params)
        if u == 0:
            started = time.perf_counter()
    env.close()
    seconds = time.perf_counter() - started
    return {
        "sps": (config.num_updates - 1) * T * B / seconds,
        "final_return": float(np.mean(returns[-window:])) if returns else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("--config", default="ppo_gymnasium_cartpole")
    p.add_argument("--override", action="append", default=[], help="both sides: section.key=v")
    p.add_argument(
        "--baseline-override",
        action="append",
        default=[],
        help="the plain loop only, e.g. env.num_envs=1 (a first script's settings)",
    )
    p.add_argument("--steps", type=int, default=131_072, help="train.total_steps")
    p.add_argument("--lags", default="0,1")
    p.add_argument(
        "--seed-per-repeat",
        action="store_true",
        help="round r trains train.seed=r on both sides (returns over seeds, not one seed)",
    )
    args = p.parse_args(argv)
    overrides = [*args.override, f"train.total_steps={args.steps}", "train.progress=false"]
    lags = [int(x) for x in args.lags.split(",")]

    def seeded(round_):
        return [*overrides, f"train.seed={round_}"] if args.seed_per_repeat else overrides

    window = jaxrl_async.load_config(args.config, overrides).env.num_envs

    def baseline(round_):
        plain = jaxrl_async.load_config(args.config, [*seeded(round_), *args.baseline_override])
        return run_baseline(plain, window)

    programs = {"plain loop": baseline}
    for lag in lags:
        programs[f"trainer, lag {lag}"] = lambda r, lag=lag: train_once(args.config, seeded(r), lag)
    runs = harness.interleave(programs, args.repeats)
    rows = [
        [
            name,
            harness.cell(harness.of(rs, "sps")),
            "1"
            if name == "plain loop"
            else harness.cell(harness.ratios(rs, runs["plain loop"]), ".2f"),
            harness.cell(harness.of(rs, "final_return"), ".1f"),
        ]
        for name, rs in runs.items()
    ]
    returns = "final return" + ("" if args.seed_per_repeat else " (one seed)")
    columns = ["run", "training SPS", "ratio to the plain loop", returns]
    return harness.report(
        __file__,
        argv,
        columns,
        rows,
        args.json,
        overrides=overrides,
        baseline_overrides=args.baseline_override,
        runs=runs,
    )


if __name__ == "__main__":
    sys.exit(main())
