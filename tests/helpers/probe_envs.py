"""Tiny pure-JAX environments with known optimal returns, written against the gymnax 1.0 API
without subclassing gymnax: proof that any object with the API trains."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import spaces


@struct.dataclass
class MatchState:
    context: jax.Array
    time: jax.Array


@struct.dataclass
class MatchParams:
    episode_length: int = 8


class MatchContext:
    """Each step shows one of two contexts (one-hot); reward 1 for the action equal to it.

    Episodes terminate after `episode_length` steps, so the optimal return is
    `episode_length` and a uniform policy gets half of it.
    """

    @property
    def default_params(self) -> MatchParams:
        return MatchParams()

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (2,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(2)

    def _obs(self, context):
        return jax.nn.one_hot(context, 2, dtype=jnp.float32)

    def reset(self, key, params):
        context = jax.random.bernoulli(key).astype(jnp.int32)
        return self._obs(context), MatchState(context, jnp.int32(0))

    def step(self, key, state, action, params):
        reward = (action == state.context).astype(jnp.float32)
        time = state.time + 1
        terminated = time >= params.episode_length
        context = jax.random.bernoulli(key).astype(jnp.int32)
        next_obs = self._obs(context)
        reset_obs, reset_state = self.reset(key, params)
        new_state = MatchState(context, time)
        state = jax.tree.map(lambda r, s: jnp.where(terminated, r, s), reset_state, new_state)
        obs = jnp.where(terminated, reset_obs, next_obs)
        info: dict[str, Any] = {"final_observation": next_obs}
        return obs, state, reward, terminated, jnp.bool_(False), info


# ---------------------------------------------------------------------------------------------
# A tiny gymnax-1.0-API env: walk right with action 1.
#   obs = [pos, time] float32; reward = 0.5 + action;
#   terminated when pos >= goal, truncated when time >= max_steps (both may hold at once);
#   auto-resets on either, with the pre-reset observation in info["final_observation"].


@struct.dataclass
class WalkParams:
    max_steps: int = 4
    goal: int = 3


@struct.dataclass
class WalkState:
    pos: jax.Array
    time: jax.Array


class WalkEnv:
    @property
    def default_params(self):
        return WalkParams()

    def observation_space(self, params):
        return spaces.Box(0.0, 100.0, (2,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(2)

    def _obs(self, state):
        return jnp.stack([state.pos, state.time]).astype(jnp.float32)

    def reset(self, key, params=None):
        state = WalkState(jnp.int32(0), jnp.int32(0))
        return self._obs(state), state

    def step(self, key, state, action, params=None):
        params = self.default_params if params is None else params
        state = WalkState(state.pos + action.astype(jnp.int32), state.time + 1)
        reward = 0.5 + action.astype(jnp.float32)
        terminated = state.pos >= params.goal
        truncated = state.time >= params.max_steps
        done = jnp.logical_or(terminated, truncated)
        final_obs = self._obs(state)
        reset_obs, reset_state = self.reset(key, params)
        state = jax.tree.map(lambda r, s: jnp.where(done, r, s), reset_state, state)
        obs = jnp.where(done, reset_obs, final_obs)
        return obs, state, reward, terminated, truncated, {"final_observation": final_obs}


def advantages_reference(values, next_values, rewards, terminated, truncated, gamma, lambda_):
    """Plain Python, [T][B] lists. next_values[t] = V(true next observation, before any reset).

    delta_t = r_t + gamma (1 - terminated_t) V(s'_t) - V(s_t)
    A_t     = delta_t + gamma lambda (1 - done_t) A_{t+1},   done = terminated or truncated
    """
    T, B = len(values), len(values[0])
    out = [[0.0] * B for _ in range(T)]
    for b in range(B):
        advantage = 0.0
        for t in reversed(range(T)):
            done = terminated[t][b] or truncated[t][b]
            delta = (
                rewards[t][b] + gamma * (1 - terminated[t][b]) * next_values[t][b] - values[t][b]
            )
            advantage = delta + gamma * lambda_ * (1 - done) * advantage
            out[t][b] = advantage
    return np.array(out)


def walk_rollout(make_agent, T=16, B=4, normalize_obs=False):
    """(pipeline, initial state, trajectory [T, B]) of `make_agent(ctx)` on WalkEnv
    (`normalize_obs`: seen through running observation statistics).

    Sixteen steps of four envs see episodes end by termination and by truncation.
    """
    from jaxrl_async.envs import check_env, make_batched
    from jaxrl_async.pipeline.program import PipelineShape, make_pipeline
    from jaxrl_async.pipeline.sharding import AXIS
    from jaxrl_async.types import BuildContext

    env = WalkEnv()
    params = env.default_params
    agent = make_agent(BuildContext(check_env(env, params), B, T, 1, axis_name=AXIS))
    batched = make_batched(env, normalize_obs, axis_name=AXIS)
    pipeline = make_pipeline(agent, batched, params, PipelineShape(T, B))
    state = jax.jit(pipeline.init)(jax.random.PRNGKey(0))
    _, _, _, traj, _ = jax.jit(pipeline.rollout)(
        state.learner.params, state.env_state, state.obs, state.memory, jax.random.PRNGKey(1)
    )
    return pipeline, state, traj


# ---------------------------------------------------------------------------------------------
# A dict observation with an image and an action mask (the shape of a jumanji env's).


class MaskedImageMatch:
    """MatchContext seen as an image, with a third action that is never legal.

    obs = {"image": float32 [4, 4, 2], the context's plane all ones; "action_mask":
    [True, True, False]}. Action 0/1 earns 1 when it equals the context; action 2, if an
    agent ignored the mask, would earn 2 every step. Episodes end after `episode_length`
    steps (terminated), so a policy that respects the mask scores at most
    `episode_length`, and any return above it proves an illegal action was taken.
    """

    ILLEGAL_REWARD = 2.0

    @property
    def default_params(self) -> MatchParams:
        return MatchParams()

    def observation_space(self, params):
        return spaces.Dict(
            {
                "image": spaces.Box(0.0, 1.0, (4, 4, 2), jnp.float32),
                "action_mask": spaces.Box(0, 1, (3,), jnp.bool_),
            }
        )

    def action_space(self, params):
        return spaces.Discrete(3)

    def _obs(self, context):
        image = jnp.broadcast_to(jax.nn.one_hot(context, 2, dtype=jnp.float32), (4, 4, 2))
        return {"image": image, "action_mask": jnp.array([True, True, False])}

    def reset(self, key, params):
        context = jax.random.bernoulli(key).astype(jnp.int32)
        return self._obs(context), MatchState(context, jnp.int32(0))

    def step(self, key, state, action, params):
        reward = jnp.where(
            action == 2, self.ILLEGAL_REWARD, (action == state.context).astype(jnp.float32)
        )
        time = state.time + 1
        terminated = time >= params.episode_length
        context = jax.random.bernoulli(key).astype(jnp.int32)
        next_obs = self._obs(context)
        reset_obs, reset_state = self.reset(key, params)
        state = jax.tree.map(
            lambda r, s: jnp.where(terminated, r, s), reset_state, MatchState(context, time)
        )
        obs = jax.tree.map(lambda r, n: jnp.where(terminated, r, n), reset_obs, next_obs)
        return obs, state, reward, terminated, jnp.bool_(False), {"final_observation": next_obs}


# ---------------------------------------------------------------------------------------------
# A task only a policy with memory can solve: act with the parity of the step.


@struct.dataclass
class ClockState:
    time: jax.Array
    length: jax.Array


class ClockEnv:
    """A blank observation (one zero) every step; reward 1 when the action equals the
    parity of the step within the episode (0, 1, 0, ...). Each episode's length is
    drawn from 3..6 at its reset (terminated at its end), so envs end their episodes at
    different times. A policy that counts the steps since its episode began (a carry
    reset at every episode start) earns 1 every step; a memoryless one half of that."""

    default_params = None

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (1,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(2)

    def reset(self, key, params=None):
        length = jax.random.randint(key, (), 3, 7)
        return jnp.zeros(1, jnp.float32), ClockState(jnp.int32(0), length)

    def step(self, key, state, action, params=None):
        reward = (action == state.time % 2).astype(jnp.float32)
        time = state.time + 1
        terminated = time >= state.length
        obs, reset_state = self.reset(key, params)
        state = jax.tree.map(
            lambda r, s: jnp.where(terminated, r, s), reset_state, ClockState(time, state.length)
        )
        return obs, state, reward, terminated, jnp.bool_(False), {"final_observation": obs}


def counting_agent():
    """A recurrent Agent without parameters for ClockEnv: its carry counts the steps
    since the episode began and it plays their parity (greedy and sampled alike)."""
    from jaxrl_async.types import ActOutput, Agent, GreedyOutput, LearnOutput

    def act(params, carry, obs, episode_start, keys, clock):
        carry = jnp.where(episode_start, 0, carry)
        return ActOutput(carry + 1, carry % 2, {"log_prob": jnp.zeros(carry.shape)})

    def greedy(params, carry, obs, episode_start):
        carry, action, _ = act(params, carry, obs, episode_start, None, None)
        return GreedyOutput(carry, action)

    class Learner(NamedTuple):
        params: Any

    return Agent(
        init=lambda key: Learner(jnp.zeros(())),
        act=act,
        learn=lambda state, traj, key: LearnOutput(state, {}),
        greedy=greedy,
        init_carry=lambda batch: jnp.zeros((batch,), jnp.int32),
    )


@struct.dataclass
class NoiseState:
    raw_obs: jax.Array


class NoiseEnv:
    """Gaussian observations with per-dimension mean MU and scale SIGMA; never ends."""

    MU = np.array([3.0, -2.0, 0.0], np.float32)
    SIGMA = np.array([2.0, 0.5, 10.0], np.float32)

    default_params = None

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (3,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(2)

    def _draw(self, key):
        obs = self.MU + self.SIGMA * jax.random.normal(key, (3,))
        return obs, NoiseState(obs)

    def reset(self, key, params=None):
        return self._draw(key)

    def step(self, key, state, action, params=None):
        obs, state = self._draw(key)
        false = jnp.bool_(False)
        return obs, state, jnp.float32(0.0), false, false, {"final_observation": obs}
