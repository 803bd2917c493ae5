"""PQN: the LayerNorm Q-network, Q(lambda) targets from the online network (no target
network), masks, lag, sweeps, bad configs, learning CartPole (its resume is
test_resume.py's, its devices test_multidevice.py's)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async
from jaxrl_async.agents.pqn import PQNState, make_pqn
from jaxrl_async.config.agents import PQNConfig
from jaxrl_async.envs import check_env, make
from jaxrl_async.errors import ConfigError
from jaxrl_async.nn.networks import QNetwork
from jaxrl_async.types import ActorClock, BuildContext
from tests.helpers.cli import run_cli_in_process
from tests.helpers.configs import PQN_LAG1, PQN_TINY
from tests.helpers.learning import assert_learns, curves
from tests.helpers.probe_envs import MaskedImageMatch, walk_rollout
from tests.helpers.references import q_lambda_reference

TINY = PQN_TINY


def _param_names(params):
    return {jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_leaves_with_path(params)}


def test_q_network_has_a_layer_norm_after_every_hidden_layer():
    env, env_params = make("CartPole-v1")
    spec = check_env(env, env_params)
    agent = make_pqn(PQNConfig(hidden_sizes=(8, 8)), BuildContext(spec, 4, 16, 1))
    # Shapes are enough here: no parameter values are computed.
    names = _param_names(jax.eval_shape(agent.init, jax.random.key(0)).params)
    for layer in (0, 1):
        for leaf in ("scale", "bias"):
            assert f"['params']['MLP_0']['LayerNorm_{layer}']['{leaf}']" in names, names
    assert not any("LayerNorm_2" in n for n in names)
    plain = make_pqn(PQNConfig(hidden_sizes=(8, 8), layer_norm=False), BuildContext(spec, 4, 16, 1))
    plain_names = _param_names(jax.eval_shape(plain.init, jax.random.key(0)).params)
    assert not any("LayerNorm" in n for n in plain_names)

    # The conv torso normalises every conv layer's output too (over its channels).
    image = MaskedImageMatch()
    cnn = make_pqn(
        PQNConfig(
            hidden_sizes=(8,),
            torso="cnn",
            cnn_channels=(4, 4),
            cnn_kernels=(3, 3),
            cnn_strides=(1, 1),
        ),
        BuildContext(check_env(image, image.default_params), 4, 16, 1),
    )
    params = jax.eval_shape(cnn.init, jax.random.key(0)).params["params"]
    conv_norms = [params["Encoder_0"][f"LayerNorm_{i}"]["scale"].shape for i in (0, 1)]
    assert conv_norms == [(4,), (4,)]
    assert params["MLP_0"]["LayerNorm_0"]["scale"].shape == (8,)


WALK_CONFIG = PQNConfig(
    hidden_sizes=(8,),
    gamma=0.9,
    q_lambda=0.7,
    reward_scale=0.5,
    num_epochs=1,
    num_minibatches=1,
    anneal_lr=False,
)


@pytest.fixture(scope="module")
def walk():
    """(agent, jitted pipeline.learn, initial learner state, trajectory [16, 4]) on WalkEnv,
    whose episodes end by termination and by truncation within the rollout."""
    built = []
    pipeline, state, traj = walk_rollout(
        lambda ctx: built.append(make_pqn(WALK_CONFIG, ctx)) or built[0], 16, 4
    )
    return built[0], jax.jit(pipeline.learn), state.learner, traj


def test_targets_are_q_lambda_of_the_online_network_and_learn_fits_them(walk):
    """The learner state holds one set of parameters and no target network; the targets
    are the plain-Python Q(lambda) of max_a Q(x'_t, a) from those parameters; and one epoch
    of one minibatch reports the loss of exactly those targets, told apart from the usual
    mistakes (no bootstrap at a truncation, the reset observation's value instead)."""
    agent, learn, learner, traj = walk
    config, (T, B) = WALK_CONFIG, traj.reward.shape
    assert isinstance(learner, PQNState)
    assert list(learner.__dataclass_fields__) == ["params", "opt_state", "hparams"]
    terminated, truncated = np.asarray(traj.terminated), np.asarray(traj.truncated)
    assert (truncated & ~terminated).any() and terminated.any(), "need both kinds of ending"

    apply = jax.jit(QNetwork(2, config.torso_spec()._replace(layer_norm=True)).apply)
    q = lambda obs: np.asarray(  # noqa: E731
        apply(learner.params, np.asarray(obs).reshape(-1, 2))
    ).reshape(T, B, 2)
    rewards = (config.reward_scale * np.asarray(traj.reward)).tolist()
    expected = q_lambda_reference(
        rewards,
        terminated.tolist(),
        truncated.tolist(),
        q(traj.next_obs).tolist(),
        config.gamma,
        config.q_lambda,
    )
    batch = jax.jit(agent.targets)(learner, jax.tree.map(np.asarray, traj))
    np.testing.assert_allclose(np.asarray(batch["target"]), expected, rtol=1e-5, atol=1e-5)

    q_taken = np.take_along_axis(q(traj.obs), np.asarray(traj.action)[..., None], -1)[..., 0]
    loss = lambda target: 0.5 * np.mean((target - q_taken) ** 2)  # noqa: E731
    no_bootstrap = q_lambda_reference(
        rewards,
        (terminated | truncated).tolist(),
        truncated.tolist(),
        q(traj.next_obs).tolist(),
        config.gamma,
        config.q_lambda,
    )
    reset_obs = np.concatenate([np.asarray(traj.obs)[1:], np.asarray(traj.next_obs)[-1:]])
    from_reset = q_lambda_reference(
        rewards,
        terminated.tolist(),
        truncated.tolist(),
        q(reset_obs).tolist(),
        config.gamma,
        config.q_lambda,
    )
    for wrong in (no_bootstrap, from_reset):
        assert abs(loss(wrong) - loss(expected)) > 1e-3 * loss(expected)

    new, metrics, _ = learn(learner, traj, jax.random.key(2))
    assert float(metrics["loss"]) == pytest.approx(loss(expected), rel=1e-4, abs=1e-7)
    assert float(metrics["target_mean"]) == pytest.approx(expected.mean(), rel=1e-4, abs=1e-6)
    # The actor's epsilon at each step's clock (4 envs a step), averaged over the rollout.
    schedule = 1.0 - 0.95 * 4 * np.arange(T) / config.epsilon_decay_steps
    assert float(metrics["epsilon"]) == pytest.approx(schedule.mean(), rel=1e-6)
    moved = max(
        float(np.abs(np.asarray(a) - np.asarray(b)).max())
        for a, b in zip(jax.tree.leaves(new.params), jax.tree.leaves(learner.params))
    )
    assert moved > 0


def test_masked_actions_are_never_taken_nor_bootstrapped_from():
    """An image + mask observation whose illegal action 2 has by far the largest raw Q:
    greedy and epsilon-greedy (epsilon 1) actions never take it, and the target's max
    ignores it."""
    env = MaskedImageMatch()
    spec = check_env(env, env.default_params)
    config = PQNConfig(hidden_sizes=(8,), torso="cnn", cnn_channels=(4,), q_lambda=0.0, gamma=0.5)
    agent = make_pqn(config, BuildContext(spec, 256, 1, 1))
    net = QNetwork(3, config.torso_spec()._replace(layer_norm=True))

    @jax.jit  # one program: compiling each piece apart costs more than running them
    def run(key):
        init_key, reset_key, act_key = jax.random.split(key, 3)
        learner = agent.init(init_key)
        head = learner.params["params"]["Dense_0"]  # the Q head
        params = {
            "params": {
                **learner.params["params"],
                "Dense_0": {**head, "bias": head["bias"].at[2].add(100.0)},
            }
        }
        obs, _ = jax.vmap(env.reset, (0, None))(
            jax.random.split(reset_key, 256), env.default_params
        )
        clock = ActorClock(jnp.int32(0), jnp.arange(256), 256)
        _, sampled, extras = agent.act(
            params, None, obs, None, jax.random.split(act_key, 256), clock
        )
        # One step per env, no episode ending: lambda 0 gives r + gamma max_a Q(x', a).
        one = lambda x: x[None]  # noqa: E731
        traj = jaxrl_async.types.Transition(
            jax.tree.map(one, obs),
            one(sampled),
            jnp.ones((1, 256)),
            jnp.zeros((1, 256), bool),
            jnp.zeros((1, 256), bool),
            jax.tree.map(one, obs),
            extras,
            jnp.zeros((1, 256), jnp.int32),
        )
        target = agent.targets(learner.replace(params=params), traj)["target"][0]
        raw = net.apply(params, {**obs, "action_mask": jnp.ones_like(obs["action_mask"])})
        greedy = agent.greedy(params, None, obs, None).action
        return sampled, greedy, extras["epsilon"], target, raw

    sampled, greedy, epsilon, target, raw = map(np.asarray, run(jax.random.key(0)))
    best_legal = raw[:, :2].max(-1)
    assert np.all(raw[:, 2] > best_legal + 50), "the bias must favour action 2"
    assert set(sampled.tolist()) == {0, 1} and not np.any(greedy == 2)
    np.testing.assert_allclose(epsilon, 1.0)
    np.testing.assert_allclose(target, 1.0 + 0.5 * best_legal, rtol=1e-5)


@pytest.mark.parametrize(
    "override, key",
    [
        ("agent.q_lambda=1.5", "agent.q_lambda"),
        ("agent.gamma=-0.1", "agent.gamma"),
        ("agent.epsilon_end=2", "agent.epsilon_end"),
        ("agent.epsilon_decay_steps=0", "agent.epsilon_decay_steps"),
        ("agent.num_minibatches=5", "agent.num_minibatches"),
        ("agent.reward_scale=0", "agent.reward_scale"),
        ("agent.memory=gru", "agent.memory"),
    ],
)
def test_bad_pqn_config_is_one_line_config_error(override, key):
    with pytest.raises(ConfigError) as info:
        jaxrl_async.load_config("pqn_cartpole", [override])
    message = str(info.value)
    assert key in message and "\n" not in message, message


def test_pqn_rejects_continuous_actions():
    env, params = make("Pendulum-v1")
    with pytest.raises(ConfigError, match="pqn needs a discrete action space"):
        make_pqn(PQNConfig(), BuildContext(check_env(env, params), 4, 16, 1))


def test_cli_bad_pqn_value_exits_2_with_one_line(tmp_path):
    code, stderr = run_cli_in_process("train", "pqn_cartpole", "agent.q_lambda=-0.5", cwd=tmp_path)
    assert code == 2, (code, stderr[-2000:])
    lines = stderr.splitlines()
    assert lines == ["jaxrl-async: error: agent.q_lambda must be in [0, 1], got -0.5"], lines
    assert not any(tmp_path.iterdir()), "nothing may be written"


@pytest.mark.slow
def test_lag_1_run_learns_on_stale_data_and_follows_the_epsilon_schedule():
    """PQN_LAG1, the run test_resume resumes and test_multidevice splits over devices."""
    config = jaxrl_async.load_config("pqn_cartpole", PQN_LAG1)
    result = jaxrl_async.train(config)
    assert result.metrics["policy_lag_max"][-1] == 1
    assert int(result.state.updates) == 8 and int(result.state.env_steps) == 1024
    # The actor's epsilon follows the env-step clock: one minus steps/512 down to 0.05.
    epsilon = np.asarray(result.metrics["epsilon"])
    assert epsilon[0] > epsilon[1] > epsilon[2]
    assert epsilon[-1] == pytest.approx(config.agent.epsilon_end, rel=1e-5)
    assert np.all(np.isfinite(result.metrics["loss"]))


def test_learn_reads_every_sweepable_value_from_the_learner_state(walk):
    """What a sweep varies per run (`configs.bind`): each SWEEPABLE field, changed in the
    state's hparams alone (the config and the compiled program stay), changes the update;
    a zero learning rate leaves the parameters where they were."""
    _, learn, learner, traj = walk
    assert set(learner.hparams) == set(PQNConfig.SWEEPABLE)
    key = jax.random.key(2)

    def run(**values):  # placed as the state's own (another sharding would recompile learn)
        hparams = {
            **learner.hparams,
            **{
                k: jax.device_put(jnp.float32(v), learner.hparams[k].sharding)
                for k, v in values.items()
            },
        }
        new, metrics, _ = learn(learner.replace(hparams=hparams), traj, key)
        flat = np.concatenate([np.ravel(x) for x in jax.tree.leaves(new.params)])
        return flat, {k: float(v) for k, v in metrics.items()}

    base_params, base = run()
    start = np.concatenate([np.ravel(x) for x in jax.tree.leaves(learner.params)])
    frozen, _ = run(learning_rate=0.0)
    np.testing.assert_array_equal(frozen, start)
    assert np.abs(base_params - start).max() > 1e-5
    changed = {"gamma": 0.5, "q_lambda": 0.0, "reward_scale": 2.0}
    for name, value in changed.items():
        _, metrics = run(**{name: value})
        assert abs(metrics["target_mean"] - base["target_mean"]) > 1e-3, name
    clipped, metrics = run(max_grad_norm=1e-3)  # the step is clipped, the norm reported is not
    assert metrics["grad_norm"] == pytest.approx(base["grad_norm"], rel=1e-6)
    assert np.abs(clipped - start).max() < np.abs(base_params - start).max()
    assert set(changed) | {"learning_rate", "max_grad_norm"} == set(PQNConfig.SWEEPABLE)


# The shipped config: four of six seeds and the median must reach 475. An occasional seed
# ends short at this budget, so the test asks for four of six rather than all (it then
# fails rarely on another CPU's float bits); half the budget leaves too many short.
@pytest.mark.slow
def test_pqn_solves_cartpole(prng="auto"):
    result = jaxrl_async.train(
        jaxrl_async.load_config(
            "pqn_cartpole", ["train.num_seeds=6", f"train.prng={prng}", "train.progress=false"]
        )
    )
    assert_learns(result, 475.0, min_passing=4)
    assert np.all(curves(result)[:, 0] < 100), "the first log point should be far from solved"
    for key in ("loss", "q_mean", "target_mean", "td_abs_mean", "grad_norm", "epsilon"):
        assert np.all(np.isfinite(result.metrics[key])), key
    assert result.metrics["epsilon"][-1] == pytest.approx(0.01, rel=1e-4)
