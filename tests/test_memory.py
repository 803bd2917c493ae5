"""Recurrent agents through the pipeline: the carry's plumbing (rollout, ticks, lag,
evaluation), the learner's re-run of stored sequences against a hand-written loop, the
minibatch rule, and the observation mask that makes CartPole partially observed."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async
from jaxrl_async.agents.actor_critic import make_actor_critic
from jaxrl_async.config.loader import EvalConfig
from jaxrl_async.envs import check_env, make_batched
from jaxrl_async.envs import make as make_env
from jaxrl_async.evaluation.evaluate import make_evaluator
from jaxrl_async.nn.networks import RecurrentActorCritic
from jaxrl_async.pipeline.build import build_pipeline
from jaxrl_async.pipeline.program import PipelineShape, make_pipeline
from jaxrl_async.pipeline.sharding import AXIS
from jaxrl_async.types import BuildContext
from tests.helpers.cli import run_cli_in_process
from tests.helpers.learning import assert_learns, seed_returns
from tests.helpers.probe_envs import ClockEnv, WalkEnv, counting_agent

GRU = [
    "env.num_envs=4",
    "pipeline.rollout_len=16",
    "agent.hidden_sizes=[8]",
    "agent.memory=gru",
    "agent.memory_size=8",
    "agent.num_minibatches=2",
    "agent.num_epochs=2",
    "train.total_steps=1024",
    "train.progress=false",
]
KEY = jax.random.key(0, impl="philox4x32")


def _leaves(tree):
    return [
        np.asarray(
            jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
        )
        for x in jax.tree.leaves(tree)
    ]


# ---------------------------------------------------------------------------------------------
# The carry's plumbing, with an agent whose carry counts the steps of its episode


@pytest.mark.parametrize("lag", [0, 1])
def test_the_pipeline_carries_and_resets_the_memory(lag):
    """Every step of every env earns 1 only if the carry follows each env through its
    episode and restarts where (and only where) that env's episode did, across ticks."""
    env = ClockEnv()
    agent = counting_agent()
    pipeline = make_pipeline(
        agent, make_batched(env, axis_name=AXIS), None, PipelineShape(8, 4, lag=lag)
    )
    state = jax.jit(pipeline.init)(KEY)
    assert state.memory.carry.shape == (4,) and state.memory.episode_start.dtype == bool
    state, metrics = jax.jit(pipeline.chunk(5))(state)
    episodes = np.asarray(metrics["episodes"])
    assert episodes.sum() > 4
    # Every finished episode was rewarded on each of its steps.
    np.testing.assert_array_equal(
        np.asarray(metrics["episode_return_sum"]), np.asarray(metrics["episode_length_sum"])
    )
    traj = (
        state.in_flight
        if lag
        else jax.jit(pipeline.rollout)(
            state.learner.params, state.env_state, state.obs, state.memory, KEY
        )[3]
    )
    np.testing.assert_array_equal(np.asarray(traj.reward), 1.0)
    # The trajectory records the carry each step acted from and where episodes began.
    start, carry = np.asarray(traj.memory.episode_start), np.asarray(traj.memory.carry)
    done = np.asarray(traj.terminated | traj.truncated)
    np.testing.assert_array_equal(start[1:], done[:-1])
    np.testing.assert_array_equal(np.where(start, 0, carry) % 2, np.asarray(traj.action))


@pytest.mark.parametrize("mode", ["greedy", "sample"])
def test_evaluation_carries_the_memory_through_each_episode(mode):
    evaluate = jax.jit(
        make_evaluator(
            counting_agent(), ClockEnv(), None, EvalConfig(episodes=8, mode=mode, max_steps=20)
        )
    )
    returns, lengths = evaluate(jnp.zeros(()), KEY, 0)
    assert set(np.asarray(lengths).tolist()) <= {3, 4, 5, 6}
    np.testing.assert_array_equal(np.asarray(returns), np.asarray(lengths))


@pytest.mark.slow
def test_a_recurrent_run_evaluates_and_its_checkpoint_does_too(tmp_path):
    from jaxrl_async.evaluation.evaluate import evaluate_run

    config = jaxrl_async.load_config(
        "ppo_cartpole", [*GRU, "eval.every=512", "eval.episodes=3", "eval.max_steps=50"]
    )
    result = jaxrl_async.train(config, run_dir=tmp_path / "run")
    assert np.isfinite(result.summary["eval_return_mean"])
    again = evaluate_run(tmp_path / "run")
    assert again["return_mean"] == result.summary["eval_return_mean"]
    sampled = evaluate_run(tmp_path / "run", mode="sample")
    assert min(sampled["lengths"]) >= 1 and max(sampled["lengths"]) <= 50


@pytest.mark.slow
def test_a_memoryless_agent_carries_nothing():
    config = jaxrl_async.load_config("ppo_cartpole", [*GRU[:3], "train.total_steps=1024"])
    pipeline, agent = build_pipeline(config)
    state = jax.jit(pipeline.init)(KEY)
    assert not agent.recurrent and state.memory is None
    _, _, memory, traj, _ = jax.jit(pipeline.rollout)(
        state.learner.params, state.env_state, state.obs, None, KEY
    )
    assert memory is None and traj.memory is None


# ---------------------------------------------------------------------------------------------
# The recurrent actor-critic: the learner's re-run against a hand-written loop


def _walk(memory: str, T=16, B=4, lag=0):
    """A recurrent PPO pipeline on WalkEnv (terminations and truncations), its state
    after two ticks, the trajectory it then writes, and the network's functions."""
    from jaxrl_async.agents.ppo import make_ppo

    config = jaxrl_async.load_config("ppo_cartpole", GRU + [f"agent.memory={memory}"]).agent
    env = WalkEnv()
    spec = check_env(env, env.default_params)
    agent = make_ppo(config, BuildContext(spec, B, T, 8, axis_name=AXIS))
    pipeline = make_pipeline(
        agent, make_batched(env, axis_name=AXIS), env.default_params, PipelineShape(T, B, lag=lag)
    )
    state, _ = jax.jit(pipeline.chunk(2))(jax.jit(pipeline.init)(KEY))
    _, _, _, traj, _ = jax.jit(pipeline.rollout)(
        state.learner.params, state.env_state, state.obs, state.memory, jax.random.key(3)
    )
    traj, params = jax.device_get((traj, state.learner.params))  # off the mesh
    net = make_actor_critic(spec, config.torso_spec(), "ppo", config.memory_spec())
    module = RecurrentActorCritic(config.torso_spec(), config.memory_spec(), spec.num_actions)
    return params, traj, net, module


def _hand_loop(params, traj, module):
    """Step by step in Python from the first stored carry: the carry before each step's
    reset, log π(a_t|·), V(x_t) and V(x'_t) (one more step of the cell from the carry
    after step t, without a reset), [T, B] each."""
    T = traj.reward.shape[0]
    carry = jax.tree.map(lambda c: c[0], traj.memory.carry)
    held, log_probs, values, next_values = [], [], [], []
    for t in range(T):
        held.append(carry)
        start = np.asarray(traj.memory.episode_start[t])
        carry = jax.tree.map(lambda c: jnp.where(start[:, None], 0.0, c), carry)
        carry, h = module.apply(
            params, carry, module.apply(params, traj.obs[t], method="embed"), method="step"
        )
        logits = module.apply(params, h, traj.obs[t], method="policy")
        log_p = jax.nn.log_softmax(logits)
        log_probs.append(
            np.take_along_axis(np.asarray(log_p), np.asarray(traj.action[t])[:, None], 1)[:, 0]
        )
        values.append(np.asarray(module.apply(params, h, method="value")))
        _, h_next = module.apply(
            params, carry, module.apply(params, traj.next_obs[t], method="embed"), method="step"
        )
        next_values.append(np.asarray(module.apply(params, h_next, method="value")))
    return held, np.stack(log_probs), np.stack(values), np.stack(next_values)


@pytest.mark.parametrize("memory", ["gru", "lstm"])
@pytest.mark.slow
def test_the_learner_reruns_stored_sequences_as_a_hand_written_loop(memory):
    """At lag 0: the actor's stored carries and log-probabilities, and the learner's
    re-run of env groups from the stored first carry (embedding batched, cell scanned),
    all equal a step-by-step loop with the same parameters."""
    params, traj, net, module = _walk(memory)
    done = np.asarray(traj.terminated | traj.truncated)
    assert done.any() and np.asarray(traj.truncated).any()
    held, log_probs, values, next_values = _hand_loop(params, traj, module)
    for t, carry in enumerate(held):  # what the actor stored is what the loop held
        for stored, hand in zip(jax.tree.leaves(traj.memory.carry), jax.tree.leaves(carry)):
            np.testing.assert_allclose(np.asarray(stored[t]), np.asarray(hand), atol=1e-6)
    np.testing.assert_allclose(np.asarray(traj.extras["log_prob"]), log_probs, atol=1e-6)

    data = {
        "obs": traj.obs,
        "next_obs": traj.next_obs,
        "action": net.scored_action(traj),
        **net.sequence_inputs(traj),
    }
    for envs in ([0, 1, 2, 3], [1, 3], [2]):  # a minibatch is any group of whole envs
        group = jax.tree.map(lambda x: x[:, envs], data)
        scored = jax.jit(net.evaluate, static_argnums=2)(params, group, True)
        np.testing.assert_allclose(np.asarray(scored.log_prob), log_probs[:, envs], atol=1e-5)
        np.testing.assert_allclose(np.asarray(scored.value), values[:, envs], atol=1e-5)
        np.testing.assert_allclose(np.asarray(scored.next_value), next_values[:, envs], atol=1e-5)
    value, next_value = jax.jit(net.values)(params, traj)
    np.testing.assert_allclose(np.asarray(value), values, atol=1e-5)
    np.testing.assert_allclose(np.asarray(next_value), next_values, atol=1e-5)


@pytest.mark.slow
def test_lag0_recurrent_tick_is_rollout_then_learn():
    """The scanned pipeline equals rollouts and updates called by hand, the memory
    handed from each rollout to the next, bitwise. The cell steps inside the one compiled
    chunk: no host callback."""
    config = jaxrl_async.load_config("ppo_cartpole", GRU)
    pipeline, _agent = build_pipeline(config)
    state = jax.jit(pipeline.init)(KEY)
    lowered = jax.jit(pipeline.chunk(3)).lower(state)
    assert "callback" not in lowered.as_text()
    final, metrics = lowered.compile()(state)

    learner, env_state, obs, memory, key = (
        state.learner,
        state.env_state,
        state.obs,
        state.memory,
        state.key,
    )
    losses = []
    for _ in range(3):
        key, rollout_key, learn_key = jax.random.split(key, 3)
        env_state, obs, memory, traj, _ = jax.jit(pipeline.rollout)(
            learner.params, env_state, obs, memory, rollout_key
        )
        learner, m, _ = jax.jit(pipeline.learn)(learner, traj, learn_key)
        losses.append(m["loss"])
    for a, b in zip(_leaves((final.learner, final.memory)), _leaves((learner, memory))):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.asarray(metrics["loss"]), np.asarray(losses))


@pytest.mark.parametrize(
    "name, kl", [("ppo_cartpole", "approx_kl"), ("impala_cartpole", "behaviour_kl")]
)
@pytest.mark.slow
def test_first_learner_pass_reproduces_the_actors_log_probs_at_lag0_only(name, kl):
    """One epoch of one minibatch: the learner's first (and only) pass scores the actions
    with the parameters that acted, so its ratio to the actor's log-probabilities is 1 up
    to rounding; at lag 1 the actor's parameters (and carries) are an update old."""
    common = [*GRU, "agent.num_epochs=1", "agent.num_minibatches=1", "agent.learning_rate=0.01"]
    kls = {}
    for lag in (0, 1):
        config = jaxrl_async.load_config(name, [*common, f"pipeline.lag={lag}"])
        pipeline, _ = build_pipeline(config)
        _, metrics = jax.jit(pipeline.chunk(4))(jax.jit(pipeline.init)(KEY))
        kls[lag] = np.asarray(metrics[kl])
    assert np.all(kls[0] < 1e-10), kls[0]
    assert np.all(kls[1][1:] > 1e-7), kls[1]  # tick 0 learns on the prefill, 0 updates old


# ---------------------------------------------------------------------------------------------
# Config and the observation mask


def test_recurrent_minibatches_must_divide_the_envs_per_device():
    with pytest.raises(jaxrl_async.ConfigError, match="groups of envs") as info:
        jaxrl_async.load_config("ppo_cartpole", [*GRU, "agent.num_minibatches=3"])
    assert "\n" not in str(info.value) and "agent.num_minibatches=3" in str(info.value)
    # Memoryless PPO splits time steps instead: 3 does not divide rollout_len 16.
    with pytest.raises(jaxrl_async.ConfigError, match="rollout_len"):
        jaxrl_async.load_config(
            "ppo_cartpole", [*GRU, "agent.memory=none", "agent.num_minibatches=3"]
        )
    # 16 envs, 4 minibatches of whole envs, any rollout length.
    jaxrl_async.load_config(
        "ppo_cartpole",
        [*GRU, "env.num_envs=16", "agent.num_minibatches=4", "pipeline.rollout_len=10"],
    )


@pytest.mark.parametrize(
    "name, bad, message",
    [
        ("dqn_cartpole", "agent.memory=gru", "dqn has no recurrent network"),
        ("ppo_cartpole", "agent.memory=rnn", "agent.memory"),
        ("ppo_cartpole", "agent.memory_size=0", "agent.memory_size"),
        ("ppo_cartpole", "env.mask_obs=[-1]", "env.mask_obs"),
    ],
)
def test_bad_memory_settings_are_one_line_config_errors(name, bad, message):
    with pytest.raises(jaxrl_async.ConfigError, match=message) as info:
        jaxrl_async.load_config(name, [bad])
    assert "\n" not in str(info.value)


def test_mask_obs_zeroes_the_cartpole_velocities():
    config = jaxrl_async.load_config("ppo_cartpole", [*GRU, "env.mask_obs=[1,3]"])
    pipeline, _ = build_pipeline(config)
    state = jax.jit(pipeline.init)(KEY)
    _, _, _, traj, _ = jax.jit(pipeline.rollout)(
        state.learner.params, state.env_state, state.obs, state.memory, KEY
    )
    for obs in (np.asarray(traj.obs), np.asarray(traj.next_obs)):
        np.testing.assert_array_equal(obs[..., [1, 3]], 0.0)
        assert np.all(np.abs(obs[..., [0, 2]]).max(axis=(0, 1)) > 0)
    assert np.asarray(traj.terminated).any()  # final observations were masked too


def test_a_mask_index_the_observation_lacks_exits_2(tmp_path):
    code, stderr = run_cli_in_process(
        "train",
        "ppo_cartpole",
        "env.mask_obs=[1,4]",
        "--run-dir",
        str(tmp_path / "r"),
        cwd=tmp_path,
    )
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "env.mask_obs=[1, 4]: index 4 is out of range" in lines[0], lines
    assert not (tmp_path / "r").exists()


def test_gymnax_params_fields_in_env_kwargs():
    from jaxrl_async import envs

    _env, params = envs.make("MemoryChain-bsuite", memory_length=12)
    assert params.memory_length == 12 and params.max_steps_in_episode == 1000


# ---------------------------------------------------------------------------------------------
# Learning: tasks a memoryless policy cannot solve, through the whole trainer


def _trained(name, overrides):
    config = jaxrl_async.load_config(
        name, [*overrides, "train.num_seeds=3", "train.progress=false"]
    )
    return jaxrl_async.train(config)


@pytest.mark.slow
def test_recurrent_ppo_learns_to_count_on_a_custom_env():
    """A custom env passed to `train` (ClockEnv: blank observations, reward 1 for the
    parity of the step, episodes of 3-6 steps, so 4.5 per episode at best): the recurrent
    policy counts, a memoryless one earns about half. The budget is twice the one at
    which a GRU seed can still fall short.
    """
    tiny = [
        "env.num_envs=8",
        "pipeline.rollout_len=32",
        "agent.hidden_sizes=[16]",
        "agent.memory_size=16",
        "agent.num_minibatches=2",
        "agent.learning_rate=3e-3",
        "agent.ent_coef=0.0",
        "train.total_steps=16384",
        "train.log_every=1024",
        "train.num_seeds=4",
        "train.progress=false",
    ]

    def returns(memory):
        config = jaxrl_async.load_config("ppo_cartpole", [*tiny, f"agent.memory={memory}"])
        return jaxrl_async.train(config, env=ClockEnv())

    assert_learns(returns("gru"), 4.0, min_passing=3)
    mlp = seed_returns(returns("none"))
    assert np.all(mlp < 3.0), f"a memoryless policy cannot count: {mlp}"


@pytest.mark.slow
def test_recurrent_ppo_balances_cartpole_without_velocities():
    """ppo_rnn_cartpole_masked at 3e5 steps (shipped 5e5): the median and 2 of 3 seeds
    reach 400; the MLP of the same config and budget stays near 50. The shorter budget
    still clears the threshold with margin under either PRNG.
    """
    budget = ["train.total_steps=300000"]
    assert_learns(_trained("ppo_rnn_cartpole_masked", budget), 400.0, min_passing=2)
    mlp = seed_returns(_trained("ppo_rnn_cartpole_masked", [*budget, "agent.memory=none"]))
    assert np.all(mlp < 100), f"the MLP should not balance without velocities: {mlp}"


@pytest.mark.slow
def test_recurrent_ppo_recalls_the_memory_chain_context():
    """ppo_rnn_memory_chain at 3e5 steps (shipped 4e5): the median and 2 of 3 seeds reach
    0.9 of the optimum (1), where a memoryless policy stays at chance (0): the context shows
    at an episode's first step only (test_memory_chain_shows_its_context_at_the_first_step_only).
    The shorter budget clears the threshold under either PRNG; half the shipped one leaves
    too many seeds short to rest a test on.
    """
    assert_learns(
        _trained("ppo_rnn_memory_chain", ["train.total_steps=300000"]), 0.9, min_passing=2
    )


def test_memory_chain_shows_its_context_at_the_first_step_only():
    """The env as the shipped config makes it: over an episode's steps before its last, the
    context bits are in the observations of time 0 and in no other, so a memoryless policy
    answers the query at chance."""
    config = jaxrl_async.load_config("ppo_rnn_memory_chain")
    env, params = make_env(config.env.name, **config.env.kwargs)
    n, length = 64, params.memory_length
    obs, state = jax.vmap(env.reset, (0, None))(jax.random.split(jax.random.key(0), n), params)
    seen, contexts = [obs], np.asarray(state.context).reshape(n, -1)
    step = jax.jit(jax.vmap(env.step, (0, 0, 0, None)))
    for t in range(1, length):
        keys = jax.random.split(jax.random.key(t), 2 * n)
        actions = jax.random.randint(keys[0], (n,), 0, env.num_actions)
        obs, state, _, _, _, _ = step(keys[n:], state, actions, params)
        seen.append(obs)
    seen = np.asarray(jnp.stack(seen))  # [step, env, (1 - time / length, query, context)]
    assert len(np.unique(contexts)) > 1, "the envs should draw different contexts"
    first = seen[..., 0] == 1.0  # time 0: at reset and (gymnax's lag) after the first step
    assert first[0].all() and not first[2:].any()
    np.testing.assert_array_equal(seen[first][:, 2:], (2 * contexts - 1)[np.nonzero(first)[1]])
    np.testing.assert_array_equal(seen[~first][:, 2:], 0.0)
