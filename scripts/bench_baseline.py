#!/usr/bin/env python
"""Plain single-program baselines against the trainer, at the same configuration.

Each baseline is the textbook algorithm written directly in flax/optax with the whole
training loop in one `jax.jit` (a `lax.scan` over updates): no pipeline, no lag, no
replay abstraction, no logging inside the run. They are the yardstick for what the
trainer's machinery costs (or saves):

  ppo  configs/ppo_cartpole.yaml: CartPole-v1, 4 envs x 128 steps, 4 epochs x 4
       minibatches of shuffled steps, GAE(0.99, 0.95), clip 0.2 (policy and value),
       ent 0.01, vf 0.5, grad-norm 0.5, Adam 2.5e-4 annealed to 0, separate actor and
       critic MLPs 64x64 tanh, orthogonal init. `--envs N` = the trainer's env.num_envs=N.
  dqn  configs/dqn_cartpole.yaml with a UNIFORM ring buffer (the trainer's config uses
       prioritized replay; the trainer runs as configured): 10 envs x 10 steps a tick,
       then 10 updates of batch 128; double DQN, squared TD error, target copied every
       50 updates, epsilon 1 -> 0.05 over 250k steps, MLP 120x84 relu, Adam 2.5e-4
       annealed, grad-norm 10, learning starts at 10k steps, capacity 10k.
  sac  configs/sac_pendulum.yaml at one env and one update of batch 256 per env step
       (trainer overrides env.num_envs=1 agent.updates_per_tick=1 replay.batch_size=256):
       twin critics, tanh-Gaussian actor, learned temperature, MLP 64x64 relu, Adam 1e-3
       (three optimizers, applied critic -> actor -> alpha as in the SAC paper's
       pseudocode), Polyak 0.005, uniform replay of 1e5, learning starts at 1000 steps.

Textbook simplifications against the trainer (all cost the baseline nothing or less):
PPO treats a truncated episode as terminal (the trainer bootstraps from V of the final
observation, one more critic pass); the baselines use JAX's default PRNG (threefry; the
trainer's train.prng=auto picks philox4x32 on one device: `--baseline-prng philox4x32`
gives the baselines the same). Both run under the XLA flags `import jaxrl_async` sets,
one CPU device per core included: the trainer runs with its default `pipeline.devices=0`,
which on CPU splits a recurrent off-policy learner (and a large on-policy one) over the
cores and keeps DQN and SAC on one device,
while each baseline is one program on one device (`--trainer-override
pipeline.devices=1` pins the trainer to one too).

Where the off-policy time goes (2-core EPYC, jax 0.10.2, one core pinned): at SAC's
1 env / 1 update of 256 a step, an update is all but the whole tick (the actor, store
and bookkeeping: 6 us a tick, the baseline's 7 us), and since the fixes of issue 14 the
trainer's update costs what the baseline's does (about 275 us; before: 350 us, and 25
copies of whole replay arrays a tick on top). Both are bound by small matmuls; the
weight-gradient ones (the batch axis contracted, the left operand transposed) run
outside YNNPACK at about half the forward matmuls' speed, and no XLA option tried moved
them (xla_cpu_multi_thread_eigen=false, xla_cpu_experimental_{xnn,ynn}_fusion_type,
xla_cpu_prefer_vector_width=512, xla_cpu_use_fusion_emitters=false: none better than
1% in interleaved runs; the last 30% slower). DQN at 10 updates of 128 a tick is the
same: its update is compute-bound and matches the baseline's, prioritized replay adding
about 7% timed alone (sum-tree descent and priority write-back), 30-50% of a tick inside
the training chunk (docs/performance.md#against-a-plain-single-program-baseline).

Timing excludes compilation for both: the baseline is compiled with `.lower().compile()`
and the run timed to `block_until_ready`; the trainer's summary "sps" counts its host
loop only. Baseline and trainer alternate, `--repeats` rounds. Final return: the
mean return of the episodes that ended in the last 10% of the run (for the trainer, in
the log records ending after 90% of it; train.log_every is set to a tenth of the run).

    python scripts/bench_baseline.py                       # ppo, dqn, sac; 3 repeats
    python scripts/bench_baseline.py --algos ppo --envs 64 --steps 1048576
    python scripts/bench_baseline.py --json baseline.json
"""

from __future__ import annotations

import os
import sys
import time

import flax.linen as nn
import gymnax
import harness  # beside this script in scripts/
import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxrl_async

DEFAULT_STEPS = {"ppo": 131_072, "dqn": 100_000, "sac": 5_000}
TRAINER = {  # the trainer's config and the overrides that match the baseline
    "ppo": ("ppo_cartpole", []),
    "dqn": ("dqn_cartpole", []),
    "sac": (
        "sac_pendulum",
        ["env.num_envs=1", "agent.updates_per_tick=1", "replay.batch_size=256"],
    ),
}


# ------------------------------------------------------------------------------ shared


class MLP(nn.Module):
    """Hidden layers with `activation`, then a linear output of `out` units. With
    `orthogonal`, PPO's init (gain sqrt 2 hidden, `out_scale` on the output); else
    flax's default init."""

    hidden: tuple[int, ...]
    out: int
    activation: str = "relu"
    orthogonal: bool = False
    out_scale: float = 1.0

    @nn.compact
    def __call__(self, x):
        act = {"relu": nn.relu, "tanh": nn.tanh}[self.activation]

        def dense(n, scale):
            if not self.orthogonal:
                return nn.Dense(n)
            return nn.Dense(
                n, kernel_init=nn.initializers.orthogonal(scale), bias_init=nn.initializers.zeros
            )

        for h in self.hidden:
            x = act(dense(h, np.sqrt(2))(x))
        return dense(self.out, self.out_scale)(x)


def vec_step(env, env_params, key, state, action):
    """Step a batch of envs (one key each); gymnax auto-resets ended episodes."""
    keys = jax.random.split(key, action.shape[0])
    return jax.vmap(env.step, (0, 0, 0, None))(keys, state, action, env_params)


def vec_reset(env, env_params, key, num_envs):
    return jax.vmap(env.reset, (0, None))(jax.random.split(key, num_envs), env_params)


def ring_init(capacity, example):
    """A uniform replay: arrays [capacity, ...] shaped like `example`'s leaves."""
    items = jax.tree.map(lambda x: jnp.zeros((capacity, *x.shape), x.dtype), example)
    return {"items": items, "pos": jnp.int32(0), "size": jnp.int32(0)}


def ring_add(buf, batch):
    """Write a batch [n, ...] at the next n slots, wrapping around (n <= capacity)."""
    capacity = jax.tree.leaves(buf["items"])[0].shape[0]
    n = jax.tree.leaves(batch)[0].shape[0]
    slots = (buf["pos"] + jnp.arange(n)) % capacity
    items = jax.tree.map(lambda b, x: b.at[slots].set(x), buf["items"], batch)
    return {
        "items": items,
        "pos": (buf["pos"] + n) % capacity,
        "size": jnp.minimum(buf["size"] + n, capacity),
    }


def ring_sample(buf, key, batch_size):
    """`batch_size` items drawn uniformly (with replacement) from the filled slots."""
    idx = jax.random.randint(key, (batch_size,), 0, buf["size"])
    return jax.tree.map(lambda x: x[idx], buf["items"])


def track_episodes(ep_ret, reward, done):
    """(running returns after this step, returns of the episodes that ended here or 0)."""
    ep_ret = ep_ret + reward
    return jnp.where(done, 0.0, ep_ret), jnp.where(done, ep_ret, 0.0)


# ------------------------------------------------------------------------------ PPO


def gae(values, rewards, dones, last_value, gamma, lam):
    """Advantages [T, B]: δ_t = r_t + γ(1-d_t)V_{t+1} - V_t, A_t = δ_t + γλ(1-d_t)A_{t+1}."""

    def step(carry, x):
        adv, next_value = carry
        value, reward, done = x
        nonterminal = 1.0 - done
        delta = reward + gamma * nonterminal * next_value - value
        adv = delta + gamma * lam * nonterminal * adv
        return (adv, value), adv

    _, advantages = jax.lax.scan(
        step,
        (jnp.zeros_like(last_value), last_value),
        (values, rewards, dones.astype(jnp.float32)),
        reverse=True,
    )
    return advantages


def make_ppo(
    total_steps,
    num_envs=4,
    num_steps=128,
    hidden=(64, 64),
    lr=2.5e-4,
    gamma=0.99,
    lam=0.95,
    clip=0.2,
    ent_coef=0.01,
    vf_coef=0.5,
    max_grad_norm=0.5,
    epochs=4,
    minibatches=4,
    env_name="CartPole-v1",
):
    """PPO: returns (train(key) -> outputs, env steps per update)."""
    env, env_params = gymnax.make(env_name)
    num_actions = env.action_space(env_params).n
    batch = num_envs * num_steps
    num_updates = total_steps // batch
    actor = MLP(hidden, num_actions, "tanh", orthogonal=True, out_scale=0.01)
    critic = MLP(hidden, 1, "tanh", orthogonal=True, out_scale=1.0)
    schedule = optax.linear_schedule(lr, 0.0, num_updates * epochs * minibatches)
    tx = optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(schedule, eps=1e-5))

    def loss_fn(params, mb):
        log_p = jax.nn.log_softmax(actor.apply(params["actor"], mb["obs"]))
        value = critic.apply(params["critic"], mb["obs"])[:, 0]
        ratio = jnp.exp(
            jnp.take_along_axis(log_p, mb["action"][:, None], -1)[:, 0] - mb["log_prob"]
        )
        adv = (mb["adv"] - mb["adv"].mean()) / (mb["adv"].std() + 1e-8)
        pg_loss = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip, 1 + clip) * adv).mean()
        v_clipped = mb["value"] + jnp.clip(value - mb["value"], -clip, clip)
        v_loss = (
            0.5
            * jnp.maximum(
                jnp.square(value - mb["target"]), jnp.square(v_clipped - mb["target"])
            ).mean()
        )
        entropy = -(jnp.exp(log_p) * log_p).sum(-1).mean()
        return pg_loss + vf_coef * v_loss - ent_coef * entropy

    def env_step(carry, _):
        params, obs, env_state, ep_ret, key = carry
        key, act_key, step_key = jax.random.split(key, 3)
        logits = actor.apply(params["actor"], obs)
        action = jax.random.categorical(act_key, logits)
        log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], -1)[:, 0]
        value = critic.apply(params["critic"], obs)[:, 0]
        next_obs, env_state, reward, term, trunc, _ = vec_step(
            env, env_params, step_key, env_state, action
        )
        done = term | trunc
        ep_ret, ended = track_episodes(ep_ret, reward, done)
        step = {
            "obs": obs,
            "action": action,
            "log_prob": log_prob,
            "value": value,
            "reward": reward,
            "done": done,
            "ended": ended,
        }
        return (params, next_obs, env_state, ep_ret, key), step

    def sgd_step(carry, mb):
        params, opt_state = carry
        grads = jax.grad(loss_fn)(params, mb)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    def update(carry, _):
        params, opt_state, obs, env_state, ep_ret, key = carry
        (_, obs, env_state, ep_ret, key), traj = jax.lax.scan(
            env_step, (params, obs, env_state, ep_ret, key), None, num_steps
        )
        last_value = critic.apply(params["critic"], obs)[:, 0]
        adv = gae(traj["value"], traj["reward"], traj["done"], last_value, gamma, lam)
        data = {
            "obs": traj["obs"],
            "action": traj["action"],
            "log_prob": traj["log_prob"],
            "value": traj["value"],
            "adv": adv,
            "target": adv + traj["value"],
        }
        data = jax.tree.map(lambda x: x.reshape(batch, *x.shape[2:]), data)

        def epoch(carry, epoch_key):
            perm = jax.random.permutation(epoch_key, batch)
            mbs = jax.tree.map(lambda x: x[perm].reshape(minibatches, -1, *x.shape[1:]), data)
            return jax.lax.scan(sgd_step, carry, mbs)[0], None

        key, epoch_key = jax.random.split(key)
        (params, opt_state), _ = jax.lax.scan(
            epoch, (params, opt_state), jax.random.split(epoch_key, epochs)
        )
        stats = (traj["ended"].sum(), traj["done"].sum())
        return (params, opt_state, obs, env_state, ep_ret, key), stats

    def train(key):
        key, actor_key, critic_key, reset_key = jax.random.split(key, 4)
        obs, env_state = vec_reset(env, env_params, reset_key, num_envs)
        params = {"actor": actor.init(actor_key, obs), "critic": critic.init(critic_key, obs)}
        carry = (params, tx.init(params), obs, env_state, jnp.zeros(num_envs), key)
        carry, (ret_sum, episodes) = jax.lax.scan(update, carry, None, num_updates)
        return {"params": carry[0], "ret_sum": ret_sum, "episodes": episodes}

    return train, batch


# ------------------------------------------------------------------------------ DQN


def make_dqn(
    total_steps,
    num_envs=10,
    steps_per_tick=10,
    updates_per_tick=10,
    batch_size=128,
    hidden=(120, 84),
    lr=2.5e-4,
    gamma=0.99,
    target_every=50,
    eps_start=1.0,
    eps_end=0.05,
    eps_decay_steps=250_000,
    learning_starts=10_000,
    capacity=10_000,
    max_grad_norm=10.0,
    env_name="CartPole-v1",
):
    """Double DQN with a uniform ring buffer: returns (train(key) -> outputs, env steps
    per tick)."""
    env, env_params = gymnax.make(env_name)
    num_actions = env.action_space(env_params).n
    per_tick = num_envs * steps_per_tick
    num_ticks = total_steps // per_tick
    q_net = MLP(hidden, num_actions, "relu")
    schedule = optax.linear_schedule(lr, 0.0, num_ticks * updates_per_tick)
    tx = optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(schedule, eps=1e-5))

    def loss_fn(params, target_params, b):
        next_online = q_net.apply(params, b["next_obs"])
        next_target = q_net.apply(target_params, b["next_obs"])
        best = jnp.argmax(next_online, axis=-1)  # double DQN: online argmax, target value
        next_q = jnp.take_along_axis(next_target, best[:, None], -1)[:, 0]
        target = jax.lax.stop_gradient(b["reward"] + gamma * (1.0 - b["terminated"]) * next_q)
        q = jnp.take_along_axis(q_net.apply(params, b["obs"]), b["action"][:, None], -1)[:, 0]
        return 0.5 * jnp.mean(jnp.square(target - q))

    def env_step(carry, _):
        params, obs, env_state, ep_ret, t, key = carry
        key, coin_key, random_key, step_key = jax.random.split(key, 4)
        epsilon = eps_start + (eps_end - eps_start) * jnp.minimum(t / eps_decay_steps, 1.0)
        greedy = jnp.argmax(q_net.apply(params, obs), axis=-1)
        explore = jax.random.uniform(coin_key, (num_envs,)) < epsilon
        action = jnp.where(
            explore, jax.random.randint(random_key, (num_envs,), 0, num_actions), greedy
        )
        next_obs, env_state, reward, term, trunc, info = vec_step(
            env, env_params, step_key, env_state, action
        )
        ep_ret, ended = track_episodes(ep_ret, reward, term | trunc)
        transition = {
            "obs": obs,
            "action": action,
            "reward": reward,
            "next_obs": info["final_observation"],
            "terminated": term.astype(jnp.float32),
        }
        return (params, next_obs, env_state, ep_ret, t + num_envs, key), (
            transition,
            ended,
            term | trunc,
        )

    def learn_step(buf, carry, sample_key):
        params, target_params, opt_state, updates = carry
        batch = ring_sample(buf, sample_key, batch_size)
        grads = jax.grad(loss_fn)(params, target_params, batch)
        deltas, opt_state = tx.update(grads, opt_state, params)
        params, updates = optax.apply_updates(params, deltas), updates + 1
        target_params = jax.tree.map(
            lambda p, tp: jnp.where(updates % target_every == 0, p, tp), params, target_params
        )
        return (params, target_params, opt_state, updates), None

    def tick(carry, _):
        params, target_params, opt_state, updates, buf, obs, env_state, ep_ret, t, key = carry
        (_, obs, env_state, ep_ret, t, key), (transitions, ended, done) = jax.lax.scan(
            env_step, (params, obs, env_state, ep_ret, t, key), None, steps_per_tick
        )
        buf = ring_add(buf, jax.tree.map(lambda x: x.reshape(per_tick, *x.shape[2:]), transitions))
        key, learn_key = jax.random.split(key)
        # The buffer is only read while learning: closed over, not carried through the cond.
        learner = jax.lax.cond(
            t >= learning_starts,
            lambda c: jax.lax.scan(
                lambda c, k: learn_step(buf, c, k), c, jax.random.split(learn_key, updates_per_tick)
            )[0],
            lambda c: c,
            (params, target_params, opt_state, updates),
        )
        params, target_params, opt_state, updates = learner
        return (params, target_params, opt_state, updates, buf, obs, env_state, ep_ret, t, key), (
            ended.sum(),
            done.sum(),
        )

    def train(key):
        key, init_key, reset_key = jax.random.split(key, 3)
        obs, env_state = vec_reset(env, env_params, reset_key, num_envs)
        params = q_net.init(init_key, obs)
        example = {
            "obs": obs[0],
            "action": jnp.int32(0),
            "reward": jnp.float32(0),
            "next_obs": obs[0],
            "terminated": jnp.float32(0),
        }
        carry = (
            params,
            params,
            tx.init(params),
            jnp.int32(0),
            ring_init(capacity, example),
            obs,
            env_state,
            jnp.zeros(num_envs),
            jnp.int32(0),
            key,
        )
        carry, (ret_sum, episodes) = jax.lax.scan(tick, carry, None, num_ticks)
        return {
            "params": carry[0],
            "updates": carry[3],
            "buffer": carry[4],
            "ret_sum": ret_sum,
            "episodes": episodes,
        }

    return train, per_tick


# ------------------------------------------------------------------------------ SAC


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def squashed_sample(mean, log_std, key):
    """(a = tanh(u) in (-1, 1), log π(a)) for u ~ N(mean, exp(log_std)²), per row."""
    u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
    log_normal = (
        -0.5 * jnp.square((u - mean) / jnp.exp(log_std)) - log_std - 0.5 * np.log(2 * np.pi)
    )
    # log(1 - tanh(u)²) = 2 (log 2 - u - softplus(-2u)), stable for large |u|
    log_det = 2.0 * (np.log(2.0) - u - jax.nn.softplus(-2.0 * u))
    return jnp.tanh(u), (log_normal - log_det).sum(-1)


class TwinQ(nn.Module):
    hidden: tuple[int, ...]

    @nn.compact
    def __call__(self, obs, action):
        x = jnp.concatenate([obs, action], -1)
        return jnp.stack([MLP(self.hidden, 1)(x)[:, 0], MLP(self.hidden, 1)(x)[:, 0]])


def make_sac(
    total_steps,
    hidden=(64, 64),
    lr=1e-3,
    gamma=0.99,
    tau=0.005,
    batch_size=256,
    learning_starts=1000,
    capacity=100_000,
    init_alpha=1.0,
    env_name="Pendulum-v1",
):
    """SAC, one env, one update per env step: returns (train(key) -> outputs, 1)."""
    env, env_params = gymnax.make(env_name)
    space = env.action_space(env_params)
    action_dim = space.shape[0]
    center = (space.high + space.low) / 2.0
    half = (space.high - space.low) / 2.0
    target_entropy = -float(action_dim)
    actor = MLP(hidden, 2 * action_dim, "relu")
    critic = TwinQ(hidden)
    tx = optax.adam(lr)

    def policy(actor_params, obs, key):
        mean, log_std = jnp.split(actor.apply(actor_params, obs), 2, axis=-1)
        return squashed_sample(mean, jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX), key)

    def update(s, b, key):
        next_key, pi_key = jax.random.split(key)
        alpha = jnp.exp(s["log_alpha"])
        next_a, next_logp = policy(s["actor"], b["next_obs"], next_key)
        next_q = critic.apply(s["target"], b["next_obs"], next_a).min(0) - alpha * next_logp
        y = b["reward"] + gamma * (1.0 - b["terminated"]) * next_q
        a = (b["action"] - center) / half

        def critic_loss(p):
            return 0.5 * jnp.square(critic.apply(p, b["obs"], a) - y).mean(-1).sum()

        def actor_loss(p):
            a_pi, logp = policy(p, b["obs"], pi_key)
            return (alpha * logp - critic.apply(s["critic"], b["obs"], a_pi).min(0)).mean(), logp

        def alpha_loss(log_alpha, logp):
            return -log_alpha * jax.lax.stop_gradient(logp.mean() + target_entropy)

        def adam_step(s, name, grads):
            deltas, opt_state = tx.update(grads, s[name + "_opt"], s[name])
            return {**s, name: optax.apply_updates(s[name], deltas), name + "_opt": opt_state}

        s = adam_step(s, "critic", jax.grad(critic_loss)(s["critic"]))
        grads, logp = jax.grad(actor_loss, has_aux=True)(s["actor"])  # with the new critic
        s = adam_step(s, "actor", grads)
        s = adam_step(s, "log_alpha", jax.grad(alpha_loss)(s["log_alpha"], logp))
        return {**s, "target": optax.incremental_update(s["critic"], s["target"], tau)}

    def env_step(carry, _):
        s, buf, obs, env_state, ep_ret, t, key = carry
        key, act_key, step_key, learn_key = jax.random.split(key, 4)
        squashed, _ = policy(s["actor"], obs, act_key)
        action = center + half * squashed
        next_obs, env_state, reward, term, trunc, info = vec_step(
            env, env_params, step_key, env_state, action
        )
        buf = ring_add(
            buf,
            {
                "obs": obs,
                "action": action,
                "reward": reward,
                "next_obs": info["final_observation"],
                "terminated": term.astype(jnp.float32),
            },
        )
        t = t + 1
        s = jax.lax.cond(
            t >= learning_starts,
            lambda s: update(s, ring_sample(buf, learn_key, batch_size), learn_key),
            lambda s: s,
            s,
        )
        ep_ret, ended = track_episodes(ep_ret, reward, term | trunc)
        return (s, buf, next_obs, env_state, ep_ret, t, key), (ended.sum(), (term | trunc).sum())

    def train(key):
        key, actor_key, critic_key, reset_key = jax.random.split(key, 4)
        obs, env_state = vec_reset(env, env_params, reset_key, 1)
        critic_params = critic.init(critic_key, obs, jnp.zeros((1, action_dim)))
        s = {
            "actor": actor.init(actor_key, obs),
            "critic": critic_params,
            "target": critic_params,
            "log_alpha": jnp.float32(np.log(init_alpha)),
        }
        for name in ("actor", "critic", "log_alpha"):
            s[name + "_opt"] = tx.init(s[name])
        example = {
            "obs": obs[0],
            "action": jnp.zeros(action_dim),
            "reward": jnp.float32(0),
            "next_obs": obs[0],
            "terminated": jnp.float32(0),
        }
        carry = (s, ring_init(capacity, example), obs, env_state, jnp.zeros(1), jnp.int32(0), key)
        carry, (ret_sum, episodes) = jax.lax.scan(env_step, carry, None, total_steps)
        return {"state": carry[0], "buffer": carry[1], "ret_sum": ret_sum, "episodes": episodes}

    return train, 1


# ------------------------------------------------------------------------------ measure


def final_return(ends, ret_sums, episodes, total):
    """Mean return of the episodes in the chunks (ending at env step `ends`) that end
    after 90% of the run: the last tenth, to the chunk."""
    ends, ret_sums, episodes = map(np.asarray, (ends, ret_sums, episodes))
    last = ends > 0.9 * total
    n = episodes[last].sum()
    return float(ret_sums[last].sum() / n) if n > 0 else float("nan")


def baseline_run(algo, steps, envs, seed, prng):
    """SPS, final return, env steps and compile seconds of one baseline run."""
    if algo == "ppo":
        train, per_update = make_ppo(steps, num_envs=envs)
    elif algo == "dqn":
        train, per_update = make_dqn(steps)
    else:
        train, per_update = make_sac(steps)
    key = jax.random.key(seed, impl=prng) if prng else jax.random.key(seed)
    start = time.perf_counter()
    compiled = jax.jit(train).lower(key).compile()
    compile_seconds = time.perf_counter() - start
    start = time.perf_counter()
    out = jax.block_until_ready(compiled(key))
    seconds = time.perf_counter() - start
    ret_sum, episodes = np.asarray(out["ret_sum"]), np.asarray(out["episodes"])
    env_steps = len(ret_sum) * per_update
    ends = per_update * np.arange(1, len(ret_sum) + 1)
    return {
        "sps": env_steps / seconds,
        "final_return": final_return(ends, ret_sum, episodes, env_steps),
        "env_steps": env_steps,
        "compile_seconds": compile_seconds,
    }


def trainer_run(algo, steps, envs, seed, extra=()):
    """SPS, final return, env steps and compile seconds of one trainer run; `extra`:
    further config overrides."""
    name, overrides = TRAINER[algo]
    overrides = [*overrides, *extra]
    if algo == "ppo":
        overrides.append(f"env.num_envs={envs}")
    overrides += [
        f"train.total_steps={steps}",
        f"train.seed={seed}",
        f"train.log_every={max(1, steps // 10)}",
        "train.progress=false",
        "train.compile_cache=false",
    ]
    result = jaxrl_async.train(jaxrl_async.load_config(name, overrides))
    s, m = result.summary, result.metrics
    ret_sums = np.nan_to_num(np.asarray(m["episode_return"]) * np.asarray(m["episodes"]))
    return {
        "sps": s["sps"],
        "final_return": final_return(m["env_steps"], ret_sums, m["episodes"], s["env_steps"]),
        "env_steps": s["env_steps"],
        "compile_seconds": s["compile_seconds"],
    }


def main(argv=None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--algos", default="ppo,dqn,sac")
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="env steps per run (default: ppo 131072, or 8 updates if more; dqn 100000; sac 5000)",
    )
    parser.add_argument("--envs", type=int, default=4, help="PPO envs (env.num_envs)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--baseline-prng",
        default=None,
        help="PRNG impl of the baselines' keys (default: JAX's default)",
    )
    parser.add_argument(
        "--trainer-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra trainer config override (repeatable), e.g. "
        "replay.kind=uniform to time the trainer's DQN without PER",
    )
    args = parser.parse_args(argv)
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    unknown = [a for a in algos if a not in TRAINER]
    if unknown:
        parser.error(f"unknown algos {unknown} (ppo, dqn, sac)")

    print(
        f"jax {jax.__version__} on {jax.devices()[0].platform}; baseline PRNG "
        f"{args.baseline_prng or jax.config.jax_default_prng_impl}; trainer overrides "
        f"{args.trainer_override or 'none'}; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    results, rows = {}, []
    for algo in algos:
        steps = args.steps or (
            max(DEFAULT_STEPS[algo], 8 * args.envs * 128) if algo == "ppo" else DEFAULT_STEPS[algo]
        )
        programs = {
            "baseline": lambda _, algo=algo, steps=steps: baseline_run(
                algo, steps, args.envs, args.seed, args.baseline_prng
            ),
            "trainer": lambda _, algo=algo, steps=steps: trainer_run(
                algo, steps, args.envs, args.seed, args.trainer_override
            ),
        }
        runs = harness.interleave(programs, args.repeats, label=algo)
        base, trainer = runs["baseline"], runs["trainer"]
        if base[0]["env_steps"] != trainer[0]["env_steps"]:
            print(f"  note: {algo} baseline and trainer ran different step counts", flush=True)
        results[algo] = {"steps": steps, "envs": args.envs if algo == "ppo" else None, "runs": runs}
        rows.append(
            [
                algo + (f"/{args.envs}" if algo == "ppo" else ""),
                f"{trainer[0]['env_steps']:,}",
                harness.cell(harness.of(base, "sps")),
                harness.cell(harness.of(trainer, "sps")),
                harness.cell(harness.ratios(trainer, base), ".2f"),
                " / ".join(
                    f"{harness.spread(harness.of(rs, 'final_return'))['median']:.0f}"
                    for rs in (base, trainer)
                ),
            ]
        )
    print(f"load average {os.getloadavg()[0]:.2f} at the end", flush=True)
    columns = ["algo/envs", "steps", "baseline SPS", "trainer SPS", "trainer/baseline"]
    columns.append("final return, baseline / trainer (medians)")
    return harness.report(
        __file__, argv, columns, rows, args.json, args=vars(args), results=results
    )


if __name__ == "__main__":
    sys.exit(main())
