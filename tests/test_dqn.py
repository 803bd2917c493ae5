"""The DQN family and the pipeline's replay path: n-step storage, targets, priorities, learning."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async
from jaxrl_async.agents.dqn import DQNConfig, make_dqn, td_targets
from jaxrl_async.agents.exploration import epsilons
from jaxrl_async.agents.returns import nstep_returns
from jaxrl_async.config.loader import ReplayConfig
from jaxrl_async.envs import check_env, make
from jaxrl_async.replay import prioritized
from jaxrl_async.replay.stage import make_replay_stage, nstep_transitions
from jaxrl_async.types import BuildContext, LearnOutput, NStepTransition, Transition
from tests.helpers.configs import DQN_TINY
from tests.helpers.learning import assert_learns, curves


def nstep_reference(rewards, terminated, truncated, next_obs, n, gamma):
    """Plain Python: for each start t with a full window, walk forward up to n steps."""
    T_all, B = rewards.shape
    out = []
    for t in range(T_all - n + 1):
        row = []
        for b in range(B):
            ret, k = 0.0, 0
            while True:
                ret += gamma**k * rewards[t + k, b]
                if terminated[t + k, b]:
                    discount = 0.0
                    break
                if truncated[t + k, b]:
                    discount = gamma ** (k + 1)
                    break
                if k == n - 1:
                    discount = gamma**n
                    break
                k += 1
            row.append((ret, discount, next_obs[t + k, b]))
        out.append(row)
    return out


def random_stream(seed, steps, envs, obs_dim=2):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(steps, envs)).astype(np.float32)
    terminated = rng.random((steps, envs)) < 0.15
    truncated = rng.random((steps, envs)) < 0.15  # sometimes both: termination wins
    obs = rng.normal(size=(steps, envs, obs_dim)).astype(np.float32)
    next_obs = rng.normal(size=(steps, envs, obs_dim)).astype(np.float32)
    actions = rng.integers(0, 3, size=(steps, envs)).astype(np.int32)
    return obs, actions, rewards, terminated, truncated, next_obs


def as_transition(obs, actions, rewards, terminated, truncated, next_obs):
    return Transition(
        jnp.asarray(obs),
        jnp.asarray(actions),
        jnp.asarray(rewards),
        jnp.asarray(terminated),
        jnp.asarray(truncated),
        jnp.asarray(next_obs),
        {},
        jnp.zeros(rewards.shape, jnp.int32),
    )


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_nstep_transitions_match_a_python_reference(n):
    gamma = 0.9
    obs, actions, rewards, terminated, truncated, next_obs = random_stream(n, 24 + n - 1, 3)
    ref = nstep_reference(rewards, terminated, truncated, next_obs, n, gamma)
    items = nstep_transitions(
        as_transition(obs, actions, rewards, terminated, truncated, next_obs), n, gamma
    )
    assert items.reward.shape == (24, 3)
    for t in range(24):
        for b in range(3):
            ret, discount, bootstrap = ref[t][b]
            np.testing.assert_allclose(items.reward[t, b], ret, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(items.discount[t, b], discount, rtol=1e-6)
            np.testing.assert_array_equal(items.next_obs[t, b], bootstrap)
    np.testing.assert_array_equal(items.obs, obs[:24])
    np.testing.assert_array_equal(items.action, actions[:24])


def test_nstep_returns_rejects_a_short_window():
    with pytest.raises(ValueError, match="window"):
        nstep_returns(jnp.zeros((2, 1)), jnp.zeros((2, 1), bool), jnp.zeros((2, 1), bool), 3, 0.9)


def test_store_completes_windows_across_rollouts():
    """The window carries n-1 steps into the next rollout: every step is stored once, in
    order, with the n-step target of the uninterrupted stream."""
    n, gamma, T, B = 3, 0.95, 4, 2
    stream = random_stream(7, 4 * T + n - 1, B)
    full = as_transition(*stream)
    stage = make_replay_stage(
        jaxrl_async.types.ReplayUse(n, gamma, 1), ReplayConfig(kind="uniform", capacity=64), 1, 1000
    )
    example = jax.tree.map(lambda x: x[0, 0], nstep_transitions(full, n, gamma))
    replay = stage.init(example)
    window = jax.tree.map(lambda x: x[: T + n - 1], full)  # what init's prefill rollout leaves
    for i in range(3):
        replay = stage.store(replay, window)
        rollout = jax.tree.map(lambda x: x[T + n - 1 + i * T : T + n - 1 + (i + 1) * T], full)
        window = stage.advance(window, rollout)
    stored = jax.tree.map(lambda x: x[: 3 * T * B].reshape(3 * T, B, *x.shape[1:]), replay.items)
    expected = nstep_transitions(jax.tree.map(lambda x: x[: 3 * T + n - 1], full), n, gamma)
    for got, want in zip(stored, expected):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert int(replay.size) == 3 * T * B
    np.testing.assert_array_equal(window.reward, full.reward[3 * T : 4 * T + n - 1])


def test_double_dqn_target_takes_online_argmax_and_target_value():
    online = jnp.array([[1.0, 5.0, 2.0], [0.0, -1.0, 3.0]])
    target = jnp.array([[10.0, 20.0, 30.0], [7.0, 8.0, 9.0]])
    reward, discount = jnp.array([1.0, 2.0]), jnp.array([0.5, 0.0])
    np.testing.assert_allclose(
        td_targets(online, target, reward, discount, double=True), [1.0 + 0.5 * 20.0, 2.0]
    )
    # Plain DQN takes the target network's own maximum.
    np.testing.assert_allclose(
        td_targets(online, target, reward, discount, double=False), [1.0 + 0.5 * 30.0, 2.0]
    )


def test_epsilon_schedules():
    config = DQNConfig(epsilon_start=1.0, epsilon_end=0.1, epsilon_decay_steps=100)
    index = jnp.arange(4)
    for steps, want in ((0, 1.0), (50, 0.55), (100, 0.1), (10_000, 0.1)):
        np.testing.assert_allclose(
            epsilons(config, jnp.int32(steps), index, 4), [want] * 4, rtol=1e-6
        )
    apex = DQNConfig(per_env_epsilon=True, apex_epsilon=0.4, apex_alpha=7.0)
    got = epsilons(apex, jnp.int32(0), index, 4)
    np.testing.assert_allclose(got, [0.4 ** (1 + 7 * i / 3) for i in range(4)], rtol=1e-5)


@pytest.fixture(scope="module")
def cartpole_agent():
    env, params = make("CartPole-v1")
    config = DQNConfig(hidden_sizes=(16,), loss="mse")
    return config, make_dqn(config, BuildContext(check_env(env, params), 4, 1, 100))


def filled_replay(seed, size, capacity=64, alpha=0.6):
    rng = np.random.default_rng(seed)
    items = NStepTransition(
        obs=jnp.asarray(rng.normal(size=(size, 4)), jnp.float32),
        action=jnp.asarray(rng.integers(0, 2, size), jnp.int32),
        reward=jnp.asarray(rng.normal(size=size), jnp.float32),
        discount=jnp.asarray(rng.choice([0.0, 0.99], size), jnp.float32),
        next_obs=jnp.asarray(rng.normal(size=(size, 4)), jnp.float32),
    )
    example = jax.tree.map(lambda x: x[0], items)
    return prioritized.add(
        prioritized.init(capacity, example, alpha=alpha),
        items,
        jnp.asarray(rng.uniform(0.1, 2.0, size), jnp.float32),
    )


@pytest.mark.slow
def test_priorities_written_back_are_abs_td_error(cartpole_agent):
    config, agent = cartpole_agent
    replay_config = ReplayConfig(
        kind="prioritized",
        capacity=64,
        batch_size=16,
        learning_starts=0,
        alpha=0.6,
        beta=0.4,
        priority_eps=1e-3,
    )
    stage = make_replay_stage(agent.replay, replay_config, 1, 1000)
    learner = agent.init(jax.random.key(0))
    replay = filled_replay(0, 40)
    key = jax.random.key(3)
    _new_learner, new_replay, metrics, learned = jax.jit(
        lambda learner, r, k: stage.learn(agent.learn, learner, r, jnp.int32(500), k)
    )(learner, replay, key)
    assert bool(learned)
    # Recompute the draw and the TD errors with the parameters before the update.
    sample_key, _ = jax.random.split(jax.random.split(key, 1)[0])
    beta = 0.4 + 0.6 * 0.5
    drawn = prioritized.sample(replay, sample_key, 16, beta)
    net = jaxrl_async.nn.networks.QNetwork(2, config.torso_spec())
    q = net.apply(learner.params, drawn.items.obs)
    q_taken = q[jnp.arange(16), drawn.items.action]
    next_q = net.apply(learner.target_params, drawn.items.next_obs)
    target = (
        drawn.items.reward
        + drawn.items.discount
        * next_q[jnp.arange(16), jnp.argmax(net.apply(learner.params, drawn.items.next_obs), -1)]
    )
    td = np.abs(np.asarray(target - q_taken))
    leaves = np.asarray(new_replay.tree.leaves)
    # A repeated index keeps its largest priority (prioritized.update_priorities).
    for index in np.unique(np.asarray(drawn.indices)):
        want = max(td[np.asarray(drawn.indices) == index]) + 1e-3
        np.testing.assert_allclose(leaves[index], want**0.6, rtol=1e-4)
    untouched = np.setdiff1d(np.arange(40), np.asarray(drawn.indices))
    np.testing.assert_array_equal(leaves[untouched], np.asarray(replay.tree.leaves)[untouched])
    np.testing.assert_allclose(metrics["td_abs_mean"], td.mean(), rtol=1e-4)
    np.testing.assert_allclose(metrics["replay_beta"], beta, rtol=1e-6)


@pytest.mark.slow
def test_no_update_before_learning_starts(cartpole_agent):
    _, agent = cartpole_agent
    stage = make_replay_stage(
        agent.replay, ReplayConfig(capacity=64, batch_size=16, learning_starts=1000), 1, 10_000
    )
    learner, replay = agent.init(jax.random.key(0)), filled_replay(1, 40)
    new_learner, new_replay, metrics, learned = stage.learn(
        agent.learn, learner, replay, jnp.int32(999), jax.random.key(1)
    )
    assert not bool(learned)
    for a, b in zip(jax.tree.leaves((new_learner, new_replay)), jax.tree.leaves((learner, replay))):
        np.testing.assert_array_equal(a, b)
    assert all(float(v) == 0.0 for v in metrics.values())


@pytest.mark.slow
def test_importance_weights_scale_the_gradient(cartpole_agent):
    """A zero weight removes a sample from the loss; weights scale it linearly."""
    _, agent = cartpole_agent
    learner = agent.init(jax.random.key(0))
    replay = filled_replay(2, 32)
    drawn = prioritized.sample(replay, jax.random.key(5), 8, 1.0)
    step = jax.jit(lambda w: agent.learn(learner, drawn._replace(weights=w), jax.random.key(0)))
    half = jnp.array([1.0] * 4 + [0.0] * 4)
    _, with_zeros, _ = step(half)
    only_first = jax.tree.map(lambda x: x[:4], drawn)
    # The loss with weights [1]*4+[0]*4 over 8 items is half the mean loss of the first 4.
    _, first_four, _ = jax.jit(
        lambda: agent.learn(learner, only_first._replace(weights=jnp.ones(4)), jax.random.key(0))
    )()
    np.testing.assert_allclose(with_zeros["loss"], 0.5 * first_four["loss"], rtol=1e-5)
    np.testing.assert_allclose(with_zeros["grad_norm"], 0.5 * first_four["grad_norm"], rtol=1e-4)


def test_dqn_rejects_continuous_actions():
    env, params = make("Pendulum-v1")
    with pytest.raises(jaxrl_async.ConfigError, match="discrete"):
        make_dqn(DQNConfig(), BuildContext(check_env(env, params), 4, 1, 100))


@pytest.mark.parametrize(
    "bad, message",
    [
        (["replay.kind=ring"], "replay.kind"),
        (["replay.capacity=5"], "smaller than one tick"),
        (["pipeline.max_staleness=2"], "max_staleness"),
        (["agent.tau=0"], "agent.tau"),
        (["agent.n_step=0"], "agent.n_step"),
    ],
)
def test_replay_config_errors(bad, message):
    with pytest.raises(jaxrl_async.ConfigError, match=message):
        jaxrl_async.load_config("dqn_cartpole", bad)


TINY = DQN_TINY


@pytest.mark.parametrize("lag", [0, 2])
@pytest.mark.slow
def test_tiny_dqn_run_is_deterministic_and_reports_lag(lag):
    config = jaxrl_async.load_config("dqn_cartpole", TINY + [f"pipeline.lag={lag}"])
    a, b = jaxrl_async.train(config), jaxrl_async.train(config)
    for x, y in zip(jax.tree.leaves(a.state.learner), jax.tree.leaves(b.state.learner)):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(a.metrics["loss"], b.metrics["loss"])
    # 64 ticks of 16 steps; learning starts after 64 steps (tick 4), two updates a tick.
    assert int(a.state.learner.steps) == 2 * (64 - 4)
    assert int(a.state.env_steps) == 1024
    assert int(a.state.replay.ring.size[0]) == 256  # full: 64 ticks x 16 steps stored, 256 slots
    assert a.metrics["policy_lag_max"][-1] == lag
    assert a.metrics["learning"][0] < 1.0 and a.metrics["learning"][-1] == 1.0


@pytest.mark.slow
def test_replay_stores_raw_observations_and_the_learner_sees_them_normalised(monkeypatch):
    """With env.normalize_obs the replay holds raw observations (the same state is the
    same vector whenever it was stored) and each sampled batch reaches agent.learn
    normalised with the current statistics. NoiseEnv's first dimension has mean 3 and
    scale 2: about 3 raw, about 0 normalised."""
    import jaxrl_async.pipeline.build
    from tests.helpers.probe_envs import NoiseEnv

    seen = {}

    def recording(config, ctx):
        agent = make_dqn(config, ctx)

        def learn(state, sample, key):
            state, metrics, priorities = agent.learn(state, sample, key)
            means = {
                "seen_obs0": jnp.mean(sample.items.obs[:, 0]),
                "seen_next_obs0": jnp.mean(sample.items.next_obs[:, 0]),
            }
            if ctx.axis_name is not None:  # None on one device
                means = jax.lax.pmean(means, ctx.axis_name)
            return LearnOutput(state, {**metrics, **means}, priorities)

        seen["agent"] = True
        return agent._replace(learn=learn)

    monkeypatch.setattr(jaxrl_async.pipeline.build, "make_agent", recording)
    config = jaxrl_async.load_config("dqn_cartpole", TINY + ["env.normalize_obs=true"])
    result = jaxrl_async.train(config, env=NoiseEnv())
    assert seen["agent"]
    stored = np.asarray(result.state.replay.ring.items.obs[0])  # [capacity, 3], full
    np.testing.assert_allclose(stored.mean(0), NoiseEnv.MU, atol=0.5)
    np.testing.assert_allclose(stored.std(0), NoiseEnv.SIGMA, rtol=0.25)
    learning = result.metrics["learning"] == 1.0
    assert learning.any()
    for key in ("seen_obs0", "seen_next_obs0"):
        assert np.all(np.abs(result.metrics[key][learning]) < 0.5), result.metrics[key]


@pytest.mark.slow
def test_dqn_with_prioritized_replay_solves_cartpole(prng="philox4x32"):
    """The shipped reference config at its full budget: 2 of 3 seeds and the median
    reach 475. Nearly every seed solves at this budget under either PRNG, so the suite runs
    the default one only; smaller budgets do not learn reliably enough to test."""
    config = jaxrl_async.load_config(
        "dqn_cartpole", ["train.num_seeds=3", f"train.prng={prng}", "train.progress=false"]
    )
    assert config.replay.kind == "prioritized"
    result = jaxrl_async.train(config)
    assert_learns(result, 475.0, min_passing=2)
    first = curves(result)[:, 0]
    assert np.all(first < 50), f"the first log point should be far from solved: {first}"
