"""R2D2: recurrent DQN on prioritized replay of sequences (Kapturowski et al. 2019,
"Recurrent Experience Replay in Distributed Reinforcement Learning").

An agent of its own (`agent.name=r2d2`) rather than `dqn` with `agent.memory=gru`: what
sits between the actor and the loss differs throughout. Its replay items are sequences
with their stored carries (replay/sequences.py), not n-step transitions; its learner
unrolls a cell, burns in, rescales values and scores whole sequences. What is the same
(the double-Q target, the target network's moves) is imported from dqn.py, and the
epsilon schedules and epsilon-greedy over the legal actions from exploration.py, so `dqn`
stays memoryless and unchanged.

The network: the shared torso, then a GRU or LSTM cell, then a linear Q head (dueling
optional). The actor steps it inside the rollout, resetting the carry where an episode
starts. A learner update on a batch of sequences [L, b] (time-major here):

1. burn-in: the online cell runs over the first `burn_in` steps from the stored carry
   with the gradient stopped, so those steps only refresh the stale stored carry;
2. the remaining M = L - burn_in steps run from there with gradient: Q(x_t, a_t);
3. targets: the target network runs over all L steps from the same stored carry; Q of
   x'_t (the observation after step t, before any auto-reset) is one more cell step from
   the carry after step t, for the target network and (double Q) the online one. n-step
   returns within the trained steps stop at episode ends (a termination does not
   bootstrap, a truncation bootstraps from its final observation) and at the sequence's
   end (bootstrapping from its last x'). With value rescaling the target is
   h(R + γ^k · h⁻¹(Q_target(x', a*))), h(x) = sign(x)(sqrt(|x| + 1) - 1) + εx;
4. loss: the importance-weighted mean over sequences of the mean squared (or Huber) TD
   error over their trained steps; priority η · max|δ| + (1 - η) · mean|δ|.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from jaxrl_async.agents.common import (
    Optimizer,
    StepRule,
    flat_grad_step,
    initial_hparams,
    make_optimizer,
)
from jaxrl_async.agents.dqn import DQNState, move_target, td_targets
from jaxrl_async.agents.exploration import epsilon_greedy, epsilons, legal_actions
from jaxrl_async.agents.returns import nstep_returns
from jaxrl_async.config.agents import R2D2Config, bind
from jaxrl_async.envs.spec import obs_zeros
from jaxrl_async.errors import ConfigError
from jaxrl_async.nn.cells import initial_carry, reset_carry, unroll
from jaxrl_async.nn.initializers import orthogonal
from jaxrl_async.nn.networks import RecurrentCore, mask_logits
from jaxrl_async.types import (
    ActOutput,
    Agent,
    BuildContext,
    Carry,
    GreedyOutput,
    LearnOutput,
    ReplayUse,
    Sample,
)


class RecurrentQNetwork(RecurrentCore):
    """The recurrent core (torso, cell; `networks.RecurrentCore`) and a Q head:
    q(h, obs) -> [N, A] (illegal actions at -1e9)."""

    num_actions: int
    dueling: bool = False

    def setup(self):
        super().setup()
        self.advantage = nn.Dense(self.num_actions, kernel_init=orthogonal(1.0))
        if self.dueling:
            self.value = nn.Dense(1, kernel_init=orthogonal(1.0))

    def q(self, h, obs):
        a = self.advantage(h)
        if self.dueling:
            a = self.value(h) + a - a.mean(axis=-1, keepdims=True)
        return mask_logits(a, obs)

    def __call__(self, carry, obs):
        carry, h = self.step(carry, self.embed(obs))
        return carry, self.q(h, obs)


def value_rescale(x, eps: float):
    """h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps·x (Pohlen et al. 2018)."""
    return jnp.sign(x) * (jnp.sqrt(jnp.abs(x) + 1.0) - 1.0) + eps * x


def value_rescale_inv(x, eps: float):
    """h⁻¹(x) = sign(x)(((sqrt(1 + 4ε(|x| + 1 + ε)) - 1) / 2ε)² - 1), with the root
    written as 2(|x| + 1 + ε) / (sqrt(1 + 4ε(|x| + 1 + ε)) + 1): the same value without
    the cancellation of sqrt(1 + small) - 1 in float32."""
    a = jnp.abs(x) + 1.0 + eps
    root = 2.0 * a / (jnp.sqrt(1.0 + 4.0 * eps * a) + 1.0)
    return jnp.sign(x) * (jnp.square(root) - 1.0)


def sequence_priority(td_abs, eta: float):
    """η · max + (1 - η) · mean of |TD| [..., M] over the last (time) axis."""
    return eta * td_abs.max(axis=-1) + (1.0 - eta) * td_abs.mean(axis=-1)


def time_major(items):
    """A sampled batch of sequences [b, L, ...] as [L, b, ...] (the carry has no time axis)."""
    swap = lambda tree: jax.tree.map(lambda x: jnp.moveaxis(x, 1, 0), tree)  # noqa: E731
    return items._replace(**{k: swap(v) for k, v in items._asdict().items() if k != "carry"})


def _flat(tree, lead):
    n = math.prod(lead)
    return jax.tree.map(lambda x: x.reshape(n, *x.shape[len(lead) :]), tree)


class Unroller:
    """The network over [T, b] steps for one set of parameters (see the module docstring)."""

    def __init__(self, net: RecurrentQNetwork, params):
        self.net, self.params = net, params

    def unroll(self, carry, obs, episode_start):
        """(h [T, b, size], the carry after each step [T, b, ...]) from `carry` [b, ...],
        reset where an episode starts, as the actor did."""
        lead = jax.tree.leaves(obs)[0].shape[:2]
        x = self.net.apply(self.params, _flat(obs, lead), method="embed")
        xp = cast(jax.Array, self.net.apply(self.params, x, method="project")).reshape(*lead, -1)
        return unroll(
            lambda c, x: self.net.apply(self.params, c, x, method="recur"), carry, xp, episode_start
        )

    def q(self, h, obs):
        lead = h.shape[:2]
        q = cast(
            jax.Array, self.net.apply(self.params, _flat(h, lead), _flat(obs, lead), method="q")
        )
        return q.reshape(*lead, -1)

    def q_next(self, carries, next_obs):
        """Q(x'_t) [T, b, A]: one more cell step from the carry after each step t."""
        lead = jax.tree.leaves(next_obs)[0].shape[:2]
        x = self.net.apply(self.params, _flat(next_obs, lead), method="embed")
        stepped = self.net.apply(self.params, _flat(carries, lead), x, method="step")
        _, h = cast(tuple[Any, jax.Array], stepped)
        return self.q(h.reshape(*lead, -1), next_obs)


def sequence_loss(net: RecurrentQNetwork, config: R2D2Config, params, target_params, seq, weights):
    """(loss, (metrics, priorities [b])) of sequences `seq` (time-major [L, b, ...], carry
    [b, ...]) with importance weights [b]; the gradient flows only through `params` on the
    steps after the burn-in."""
    K, n = config.burn_in, config.n_step
    trained = lambda tree: jax.tree.map(lambda x: x[K:], tree)  # noqa: E731
    fixed = jax.lax.stop_gradient(params)
    carry = seq.carry
    if K:  # the burn-in refreshes the stored carry and passes on no gradient
        _, carries = Unroller(net, fixed).unroll(
            carry, jax.tree.map(lambda x: x[:K], seq.obs), seq.episode_start[:K]
        )
        carry = jax.lax.stop_gradient(jax.tree.map(lambda c: c[-1], carries))
    online = Unroller(net, params)
    h, carries = online.unroll(carry, trained(seq.obs), seq.episode_start[K:])
    q = online.q(h, trained(seq.obs))  # [M, b, A]
    q_taken = jnp.take_along_axis(q, seq.action[K:, :, None].astype(jnp.int32), axis=-1)[..., 0]

    target_net = Unroller(net, target_params)
    _, target_carries = target_net.unroll(seq.carry, seq.obs, seq.episode_start)
    next_obs = trained(seq.next_obs)
    next_q_target = target_net.q_next(trained(target_carries), next_obs)
    next_q_online = (
        Unroller(net, fixed).q_next(jax.lax.stop_gradient(carries), next_obs)
        if config.double
        else None
    )
    M, b, A = next_q_target.shape
    flat_online = None if next_q_online is None else next_q_online.reshape(M * b, A)
    bootstrap = td_targets(
        flat_online,
        next_q_target.reshape(M * b, A),
        jnp.zeros(M * b),
        jnp.ones(M * b),
        config.double,
    ).reshape(M, b)

    # n-step returns inside the trained steps: the sequence's last step ends every return
    # as a truncation would (bootstrapping from its x'); the padding is never reached.
    pad = lambda x: jnp.concatenate([x, jnp.zeros((n - 1, b), x.dtype)])  # noqa: E731
    truncated = seq.truncated[K:].at[-1].set(True)
    returns, discounts, offsets = nstep_returns(
        pad(seq.reward[K:]), pad(seq.terminated[K:]), pad(truncated), n, config.gamma
    )
    bootstrap = jnp.take_along_axis(bootstrap, jnp.arange(M)[:, None] + offsets, axis=0)
    if config.value_rescale:
        eps = config.rescale_eps
        target = value_rescale(returns + discounts * value_rescale_inv(bootstrap, eps), eps)
    else:
        target = returns + discounts * bootstrap
    td = jax.lax.stop_gradient(target) - q_taken  # [M, b]
    if config.loss == "huber":
        per_step = optax.huber_loss(td, delta=config.huber_delta)
    else:
        per_step = 0.5 * jnp.square(td)
    loss = jnp.mean(weights * per_step.mean(axis=0))
    td_abs = jnp.abs(td)
    metrics = {"loss": loss, "q_mean": jnp.mean(q_taken), "td_abs_mean": jnp.mean(td_abs)}
    return loss, (metrics, sequence_priority(td_abs.T, config.priority_eta))


class R2D2Learner(NamedTuple):
    """What R2D2's learner holds fixed: the network, the config, the optimizer and the
    device axis (None: one device)."""

    net: RecurrentQNetwork
    config: R2D2Config
    optimizer: Optimizer
    axis_name: str | None


def r2d2_init(learner: R2D2Learner, spec, key) -> DQNState:
    params = learner.net.init(key, initial_carry(learner.net.memory, 1), obs_zeros(spec))
    return DQNState(
        params,
        params,
        learner.optimizer.init(ravel_pytree(params)[0]),
        jnp.int32(0),
        initial_hparams(learner.config),
    )


def r2d2_learn(
    learner: R2D2Learner, state: DQNState, sample: Sample, key: jax.Array
) -> LearnOutput:
    """One Adam step on a sampled batch of sequences: (state, metrics, priorities [b])."""
    del key  # the sample carries all randomness
    hp = bind(learner.config, state.hparams)
    seq = time_major(sample.items)
    flat, unravel = ravel_pytree(state.params)

    def loss_fn(flat, _):
        params = unravel(flat)
        return sequence_loss(learner.net, hp, params, state.target_params, seq, sample.weights)

    flat, opt_state, metrics, priorities = flat_grad_step(
        loss_fn, StepRule(learner.optimizer, hp, learner.axis_name), flat, state.opt_state
    )
    params, steps = unravel(flat), state.steps + 1
    target_params = move_target(hp, params, state.target_params, steps)
    return LearnOutput(
        DQNState(params, target_params, opt_state, steps, state.hparams), metrics, priorities
    )


def make_r2d2(config: R2D2Config, ctx: BuildContext) -> Agent:
    if not ctx.spec.discrete:
        raise ConfigError("agent.name=r2d2 needs a discrete action space")
    memory = config.memory_spec()
    num_actions = ctx.spec.num_actions
    net = RecurrentQNetwork(config.torso_spec(), memory, num_actions, config.dueling)
    optimizer = make_optimizer(
        "adam", config.anneal_lr, max(1, ctx.num_updates * config.updates_per_tick), config.adam_eps
    )
    learner = R2D2Learner(net, config, optimizer, ctx.axis_name)
    action_dtype = ctx.spec.action_dtype

    def init_carry(batch: int) -> Carry:
        return initial_carry(memory, batch)

    def core(params, carry, obs, episode_start):
        carry = reset_carry(carry, episode_start)
        return net.apply(params, carry, obs)

    def act(params, carry, obs, episode_start, keys, clock) -> ActOutput:
        carry, q = core(params, carry, obs, episode_start)
        epsilon = epsilons(config, clock.env_steps, clock.env_index, clock.num_envs)
        action = epsilon_greedy(
            keys, jnp.argmax(q, axis=-1), epsilon, legal_actions(obs, num_actions)
        )
        return ActOutput(carry, action.astype(action_dtype), {})

    def greedy(params, carry, obs, episode_start) -> GreedyOutput:
        carry, q = core(params, carry, obs, episode_start)
        return GreedyOutput(carry, jnp.argmax(q, axis=-1).astype(action_dtype))

    use = ReplayUse(
        config.n_step,
        config.gamma,
        config.updates_per_tick,
        config.sequence_length,
        config.sequence_overlap,
    )

    def init(key: jax.Array) -> DQNState:
        return r2d2_init(learner, ctx.spec, key)

    def learn(state: DQNState, sample: Sample, key: jax.Array) -> LearnOutput:
        return r2d2_learn(learner, state, sample, key)

    return Agent(
        init=init,
        act=act,
        learn=learn,
        data="replay",
        replay=use,
        greedy=greedy,
        init_carry=init_carry,
    )
