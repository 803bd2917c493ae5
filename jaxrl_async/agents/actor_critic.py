"""The networks of the actor-critic agents (PPO, IMPALA), memoryless or recurrent.

`make_actor_critic` returns one interface for both kinds (`ActorCritic`), so each
agent writes its loss once: `evaluate` scores a minibatch (the taken actions'
log-probabilities, the entropies, the values) and `values` runs the critic over a
whole trajectory.

Recurrent (`agent.memory=gru|lstm`): the torso (encoder and MLP, or convs) feeds one
recurrent cell (`nn/cells.py`, GRU or LSTM), whose output feeds a linear policy head and
a linear value head. The actor steps torso, cell and policy head inside the rollout's
scan, resetting the carry where an episode starts. The learner's batches are whole
sequences of some envs [T, b]; it embeds every step and projects it into the cell's
gates in one batched call, scans only the cell's recurrence over time from the carry the
trajectory stored for its first step, with the same resets, then applies both heads to
every step at once.

Stale carries. At lag L the trajectory, and the carry it stored, came from parameters L
updates old. The learner keeps that carry (R2D2's "stored state", Kapturowski et al.
2019) and re-runs the cell over the whole rollout with its current parameters: from the
first step on, its hidden states are its own parameters' function of the observations,
seeded by an old carry whose influence fades as the cell forgets (episodes that start
inside the rollout begin from the exact zero carry). What stays stale is what the actor
recorded, the behaviour log-probabilities, and that is what the losses' importance
ratios compare the learner's policy against (PPO's clipped ratio, IMPALA's V-trace
weights), whatever part of the mismatch the carry caused. At lag 0 the learner's first
pass reproduces the actor's log-probabilities (tests/test_memory.py).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp

from jaxrl_async.envs.spec import EnvSpec, obs_zeros
from jaxrl_async.errors import ConfigError
from jaxrl_async.nn import distributions as D
from jaxrl_async.nn.cells import MemorySpec, initial_carry, reset_carry, unroll
from jaxrl_async.nn.networks import (
    CategoricalPolicy,
    GaussianPolicy,
    RecurrentActorCritic,
    SharedActorCritic,
    TorsoSpec,
    ValueHead,
)
from jaxrl_async.types import ActFn, ActOutput, GreedyFn, GreedyOutput, InitCarryFn


class Scored(NamedTuple):
    """What `ActorCritic.evaluate` computes for a minibatch, each shaped like its leading
    axes ([N] steps, or [T, b] sequences)."""

    log_prob: jax.Array  # of the minibatch's actions under the current policy
    entropy: jax.Array
    value: jax.Array  # V(x_t)
    next_value: jax.Array | None  # V(x'_t) with the gradient stopped, if asked for


class ActorCritic(NamedTuple):
    """A policy and a state-value function for one env spec, as pure functions.

    init:   key -> params
    act:    Agent.act: (params, carry, obs [B, ...], episode_start [B], keys [B], clock)
            -> ActOutput(carry, action [B, ...], extras {"log_prob"[, "raw_action"]}); the
            clock is not read; memoryless, the carry (None) passes through
    greedy: Agent.greedy, the most likely action: the argmax of the logits, or the
            Gaussian's mean clipped to the bounds (with the carry, as act)
    evaluate: (params, batch, next_value=False) -> Scored. `batch` holds "obs" and
            "action" (and "next_obs" for next_value) with leading axes [N] (memoryless:
            any steps) or [T, b] (recurrent: whole sequences), plus, recurrent, what
            `sequence_inputs` gives
    values: (params, trajectory [T, B]) -> (V(x_t), V(x'_t)) [T, B], x'_t the observation
            after step t before any auto-reset. V(x'_t) is exact where targets read it:
            at the last step and at truncations (`common.fold_truncation`); after a
            termination it may be V of the next episode's first observation
    sequence_inputs: trajectory -> the extra batch entries `evaluate` needs to re-run it
            ({} memoryless; recurrent: "carry" [1, B, ...], the carry the actor held
            before the first step, and "episode_start" [T, B])
    scored_action: trajectory -> the actions as the policy scored them (pre-clipping ones
            for a Gaussian policy, whose env actions are clipped to the bounds)
    init_carry: Agent.init_carry (None: memoryless)
    """

    init: Callable
    act: ActFn
    greedy: GreedyFn
    evaluate: Callable
    values: Callable
    sequence_inputs: Callable
    scored_action: Callable
    init_carry: InitCarryFn | None = None

    @property
    def recurrent(self) -> bool:
        return self.init_carry is not None


class Policy(NamedTuple):
    """The action distribution given a policy head's output (logits, or mean and log-std)."""

    sample: Callable  # (keys [B], out) -> (action, extras {"log_prob"[, "raw_action"]})
    score: Callable  # (out, action) -> (log_prob, entropy)
    mode: Callable  # out -> the most likely action
    scored_action: Callable  # trajectory -> the actions `score` takes


def make_policy(spec: EnvSpec, algo: str) -> Policy:
    """Categorical for discrete actions, Gaussian (clipped to the bounds) for a vector."""
    if spec.discrete:

        def sample(keys, logits):
            action = D.categorical_sample(keys, logits)
            return action, {"log_prob": D.categorical_log_prob(logits, action)}

        return Policy(
            sample,
            lambda logits, a: (D.categorical_log_prob(logits, a), D.categorical_entropy(logits)),
            lambda logits: jnp.argmax(logits, axis=-1).astype(jnp.int32),
            lambda traj: traj.action,
        )
    if len(spec.action_shape) != 1:
        raise ConfigError(f"{algo} needs a vector action, got shape {spec.action_shape}")
    low, high = jnp.asarray(spec.action_low), jnp.asarray(spec.action_high)

    def gaussian_sample(keys, out):
        mean, log_std = out
        raw = D.gaussian_sample(keys, mean, log_std)
        extras = {"log_prob": D.gaussian_log_prob(mean, log_std, raw), "raw_action": raw}
        return jnp.clip(raw, low, high).astype(spec.action_dtype), extras

    return Policy(
        gaussian_sample,
        lambda out, a: (D.gaussian_log_prob(out[0], out[1], a), D.gaussian_entropy(*out)),
        lambda out: jnp.clip(out[0], low, high).astype(spec.action_dtype),
        lambda traj: traj.extras["raw_action"],
    )


def make_actor_critic(
    spec: EnvSpec,
    torso: TorsoSpec,
    algo: str,
    memory: MemorySpec | None = None,
    shared: bool = False,
) -> ActorCritic:
    """Memoryless: separate policy and value networks on their own torsos, or with
    `shared` one torso feeding both heads. With `memory`: one torso and cell shared by
    both heads (`make_recurrent`)."""
    if memory is not None:
        return make_recurrent(spec, torso, memory, algo)
    heads = (spec.num_actions, 0) if spec.discrete else (0, spec.action_shape[0])
    if shared:
        net = SharedActorCritic(torso, *heads)
        return _memoryless(
            spec,
            algo,
            net.init,
            lambda params, obs: net.apply(params, obs, method="policy_of"),
            lambda params, obs: net.apply(params, obs, method="value_of"),
            net.apply,
        )
    actor = (
        CategoricalPolicy(spec.num_actions, torso)
        if spec.discrete
        else GaussianPolicy(spec.action_shape[0], torso)
    )
    critic = ValueHead(torso)

    def init(key, dummy):
        actor_key, critic_key = jax.random.split(key)
        return {"actor": actor.init(actor_key, dummy), "critic": critic.init(critic_key, dummy)}

    def policy_out(params, obs):
        return actor.apply(params["actor"], obs)

    def value(params, obs):
        return critic.apply(params["critic"], obs)

    return _memoryless(
        spec, algo, init, policy_out, value, lambda p, o: (policy_out(p, o), value(p, o))
    )


def _memoryless(
    spec: EnvSpec,
    algo: str,
    init: Callable,
    policy_out: Callable,
    value: Callable,
    both: Callable,
) -> ActorCritic:
    """The memoryless ActorCritic of a network given as functions: init(key, obs) ->
    params; policy_out(params, obs) -> the policy head's output; value(params, obs) -> V
    [N]; both(params, obs) -> (the two, from one pass where the torso is shared)."""
    policy = make_policy(spec, algo)

    def act(params, carry, obs, episode_start, keys, clock) -> ActOutput:
        return ActOutput(carry, *policy.sample(keys, policy_out(params, obs)))

    def greedy(params, carry, obs, episode_start) -> GreedyOutput:
        return GreedyOutput(carry, policy.mode(policy_out(params, obs)))

    def evaluate(params, batch, next_value=False):
        action = batch["action"]
        lead = action.shape[: action.ndim - len(spec.action_shape)]
        flat = _flatten(lead)
        out, v = both(params, flat(batch["obs"]))
        log_prob, entropy = policy.score(out, flat(action))
        next_v = None
        if next_value:  # V(x'_t) only feeds targets: constant parameters, no backward pass.
            next_v = value(jax.lax.stop_gradient(params), flat(batch["next_obs"]))
        return _unflatten(lead, Scored(log_prob, entropy, v, next_v))

    def values(params, traj):
        """V(x_t), and V(x'_t) from it: where an episode goes on, x'_t is x_{t+1} (both
        rollouts record the two alike: the JAX rollout observes x'_t and x_{t+1} with the
        same statistics, a host actor a round's), so the critic sees x' only at the last
        step, and at every step of a trajectory that truncates an episode before its last
        step (a branch taken at run time). Over a trajectory the value pass then costs one
        critic call per step, not two."""
        T, B = traj.reward.shape
        flat = _flatten((T, B))
        v = value(params, flat(traj.obs)).reshape(T, B)
        last = value(params, jax.tree.map(lambda x: x[-1], traj.next_obs))
        shifted = jnp.concatenate([v[1:], last[None]])

        def with_truncations():
            every = value(params, flat(traj.next_obs)).reshape(T, B)
            return jnp.where(traj.truncated, every, shifted)

        inside = jnp.any(traj.truncated[:-1])
        return v, jax.lax.cond(inside, with_truncations, lambda: shifted)

    return ActorCritic(
        lambda key: init(key, obs_zeros(spec)),
        act,
        greedy,
        evaluate,
        values,
        lambda traj: {},
        policy.scored_action,
    )


def make_recurrent(spec: EnvSpec, torso: TorsoSpec, memory: MemorySpec, algo: str) -> ActorCritic:
    """The recurrent actor-critic (module docstring); params are one network's."""
    policy = make_policy(spec, algo)
    net = RecurrentActorCritic(
        torso,
        memory,
        spec.num_actions if spec.discrete else 0,
        0 if spec.discrete else spec.action_shape[0],
    )

    def init_carry(batch: int):
        return initial_carry(memory, batch)

    def init(key):
        return net.init(key, init_carry(1), obs_zeros(spec))

    def core(params, carry, obs, episode_start):
        """One step of every env: (carry, h [B, size])."""
        x = net.apply(params, obs, method="embed")
        return net.apply(params, reset_carry(carry, episode_start), x, method="step")

    def act(params, carry, obs, episode_start, keys, clock) -> ActOutput:
        carry, h = core(params, carry, obs, episode_start)
        return ActOutput(carry, *policy.sample(keys, net.apply(params, h, obs, method="policy")))

    def greedy(params, carry, obs, episode_start) -> GreedyOutput:
        carry, h = core(params, carry, obs, episode_start)
        return GreedyOutput(carry, policy.mode(net.apply(params, h, obs, method="policy")))

    evaluate = functools.partial(recurrent_evaluate, net, policy)

    def sequence_inputs(traj):
        return {
            "carry": jax.tree.map(lambda c: c[:1], traj.memory.carry),
            "episode_start": traj.memory.episode_start,
        }

    def values(params, traj):
        batch = {
            "obs": traj.obs,
            "next_obs": traj.next_obs,
            "action": policy.scored_action(traj),
            **sequence_inputs(traj),
        }
        scored = evaluate(params, batch, next_value=True)
        return scored.value, scored.next_value

    return ActorCritic(
        init, act, greedy, evaluate, values, sequence_inputs, policy.scored_action, init_carry
    )


def recurrent_evaluate(net: RecurrentActorCritic, policy: Policy, params, batch, next_value=False):
    """`ActorCritic.evaluate` of the recurrent network: the cell re-run over whole sequences
    [T, b] from the carry stored for their first step (module docstring)."""
    lead = batch["episode_start"].shape  # [T, b]
    flat = _flatten(lead)
    obs = flat(batch["obs"])
    xp = net.apply(params, net.apply(params, obs, method="embed"), method="project")
    carry = jax.tree.map(lambda c: c[0], batch["carry"])
    h, carries = unroll(
        lambda c, x: net.apply(params, c, x, method="recur"),
        carry,
        cast(jax.Array, xp).reshape(*lead, -1),
        batch["episode_start"],
    )
    h = h.reshape(math.prod(lead), -1)
    log_prob, entropy = policy.score(
        net.apply(params, h, obs, method="policy"), flat(batch["action"])
    )
    value = cast(jax.Array, net.apply(params, h, method="value"))
    next_v = None
    if next_value:  # V(x'_t): one more cell step from the carry after step t
        fixed = jax.lax.stop_gradient(params)
        x_next = net.apply(fixed, flat(batch["next_obs"]), method="embed")
        _, h_next = net.apply(fixed, jax.lax.stop_gradient(flat(carries)), x_next, method="step")
        next_v = cast(jax.Array, net.apply(fixed, h_next, method="value"))
    return _unflatten(lead, Scored(log_prob, entropy, value, next_v))


def _flatten(lead: tuple[int, ...]) -> Callable[[Any], Any]:
    """tree [*lead, ...] -> [prod(lead), ...]."""
    n = math.prod(lead)
    return lambda tree: jax.tree.map(lambda x: x.reshape(n, *x.shape[len(lead) :]), tree)


def _unflatten(lead: tuple[int, ...], scored: Scored) -> Scored:
    return jax.tree.map(lambda x: x.reshape(lead), scored)
