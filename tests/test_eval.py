"""Evaluation: greedy actions, the evaluator's episode accounting, periodic eval, `eval` CLI."""

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async
from jaxrl_async.agents.dqn import DQNConfig, make_dqn
from jaxrl_async.agents.impala import IMPALAConfig, make_impala
from jaxrl_async.agents.ppo import PPOConfig, make_ppo
from jaxrl_async.agents.sac import SACConfig, make_sac
from jaxrl_async.config.loader import EvalConfig
from jaxrl_async.envs.spec import EnvSpec
from jaxrl_async.envs.wrappers import NormState
from jaxrl_async.evaluation.evaluate import evaluate_run, make_evaluator, obs_stats
from jaxrl_async.nn.networks import CategoricalPolicy, TorsoSpec
from jaxrl_async.types import ActOutput, Agent, BuildContext, GreedyOutput, LearnOutput
from tests.helpers.cli import run_cli_in_process
from tests.helpers.configs import PPO_SMALL
from tests.helpers.probe_envs import MatchContext, WalkEnv

DISCRETE = EnvSpec((3,), np.dtype(np.float32), True, 3, (), np.dtype(np.int32))
BOX = EnvSpec(
    (3,),
    np.dtype(np.float32),
    False,
    0,
    (2,),
    np.dtype(np.float32),
    np.array([-1.0, -2.0], np.float32),
    np.array([1.0, 2.0], np.float32),
)


def _only_bias(params, bias):
    """Every weight zero but the output layer's bias: the head outputs `bias` for any obs."""
    params = jax.tree.map(jnp.zeros_like, params)
    params["params"]["Dense_0"]["bias"] = jnp.asarray(bias, jnp.float32)
    return params


@pytest.mark.parametrize("algo", ["ppo", "impala", "ppo_box", "dqn", "sac"])
def test_greedy_is_the_mode_of_each_policy(algo):
    obs = jax.random.normal(jax.random.key(1), (5, 3))
    spec = BOX if algo in ("ppo_box", "sac") else DISCRETE
    ctx = BuildContext(spec, 4, 8, 1)
    hidden = {"hidden_sizes": (8,)}
    if algo in ("ppo", "impala", "ppo_box"):
        make, cfg = (make_impala, IMPALAConfig) if algo == "impala" else (make_ppo, PPOConfig)
        agent = make(cfg(**hidden), ctx)
        params = agent.init(jax.random.key(0)).params
        if spec.discrete:  # logits [0.1, 0.7, -0.3]: argmax 1
            params["actor"] = _only_bias(params["actor"], [0.1, 0.7, -0.3])
            expected = np.ones(5, np.int32)
        else:  # mean [3, -0.5] clipped to [-1, 1] x [-2, 2]
            params["actor"] = _only_bias(params["actor"], [3.0, -0.5])
            expected = np.tile([1.0, -0.5], (5, 1))
    elif algo == "dqn":  # Q [0.2, -1, 0.9]: argmax 2
        agent = make_dqn(DQNConfig(**hidden), ctx)
        params = _only_bias(agent.init(jax.random.key(0)).params, [0.2, -1.0, 0.9])
        expected = np.full(5, 2)
    else:  # mean [0.5, -1] (log-std after it): tanh onto [-1, 1] x [-2, 2]
        agent = make_sac(SACConfig(**hidden), ctx)
        params = _only_bias(agent.init(jax.random.key(0)).params, [0.5, -1.0, 0.3, 0.3])
        expected = np.tile([np.tanh(0.5), 2 * np.tanh(-1.0)], (5, 1))
    carry, action = jax.jit(agent.greedy)(params, None, obs, None)
    assert carry is None  # a memoryless agent's carry passes through
    assert action.shape == (5, *spec.action_shape)
    assert action.dtype == (np.int32 if spec.discrete else spec.action_dtype)
    np.testing.assert_allclose(np.asarray(action), expected, rtol=1e-6)


def test_greedy_follows_the_observation():
    """With real (random) weights the greedy action follows the observation."""
    agent = make_ppo(PPOConfig(hidden_sizes=(8,)), BuildContext(DISCRETE, 4, 8, 1))
    params = agent.init(jax.random.key(0)).params
    params["actor"] = jax.tree.map(lambda x: 10 * x, params["actor"])
    obs = jax.random.normal(jax.random.key(1), (64, 3))
    logits = CategoricalPolicy(3, TorsoSpec((8,), "tanh")).apply(params["actor"], obs)
    action = agent.greedy(params, None, obs, None).action
    np.testing.assert_array_equal(action, np.argmax(logits, axis=-1))
    assert len(set(np.asarray(action).tolist())) > 1


def _probe_agent(greedy=None, act=None):
    """A memoryless Agent of `greedy(params, obs) -> action` and/or `act(params, obs, keys,
    clock) -> action` (no extras), in the Agent's fixed signatures."""

    def agent_act(params, carry, obs, episode_start, keys, clock):
        return ActOutput(carry, act(params, obs, keys, clock), {})

    def agent_greedy(params, carry, obs, episode_start):
        return GreedyOutput(carry, greedy(params, obs))

    return Agent(
        init=lambda key: None,
        act=agent_act,
        learn=lambda state, data, key: LearnOutput(state, {}),
        greedy=None if greedy is None else agent_greedy,
    )


def test_evaluator_returns_exactly_the_first_episode_of_each_env():
    """WalkEnv: action 1 terminates after 3 steps (return 4.5), action 0 is truncated
    after 4 (return 2.0). Envs with action 1 auto-reset and keep walking until the
    others end; their second episodes must not count."""
    env = WalkEnv()

    def act(params, obs, keys, clock):  # env i walks iff i is odd, once training has begun
        assert keys.shape == (7,) and clock.num_envs == 7
        walk = (clock.env_index % 2 == 1) & (clock.env_steps > 0)
        return walk.astype(jnp.int32)

    evaluate = jax.jit(
        make_evaluator(
            _probe_agent(act=act), env, env.default_params, EvalConfig(episodes=7, mode="sample")
        )
    )
    key = jax.random.key(0)
    returns, lengths = evaluate(None, key, 100)
    odd = np.arange(7) % 2 == 1
    np.testing.assert_array_equal(returns, np.where(odd, 4.5, 2.0))
    np.testing.assert_array_equal(lengths, np.where(odd, 3, 4))
    returns, lengths = evaluate(None, key, 0)  # the clock says the run's env steps
    np.testing.assert_array_equal(returns, np.full(7, 2.0))

    capped = jax.jit(
        make_evaluator(
            _probe_agent(act=act),
            env,
            env.default_params,
            EvalConfig(episodes=7, mode="sample", max_steps=2),
        )
    )
    returns, lengths = capped(None, key, 100)  # unfinished at the cap: the return so far
    np.testing.assert_array_equal(returns, np.where(odd, 3.0, 1.0))
    np.testing.assert_array_equal(lengths, np.full(7, 2))


def test_evaluator_on_match_context_reaches_the_known_optimum():
    env = MatchContext()
    optimal = _probe_agent(greedy=lambda params, obs: jnp.argmax(obs, axis=-1))
    evaluate = jax.jit(
        make_evaluator(optimal, env, env.default_params, EvalConfig(episodes=5, mode="greedy"))
    )
    returns, lengths = evaluate(None, jax.random.key(3), 0)
    episode_length = env.default_params.episode_length
    np.testing.assert_array_equal(returns, np.full(5, float(episode_length)))
    np.testing.assert_array_equal(lengths, np.full(5, episode_length))


def test_evaluator_normalises_with_the_given_frozen_statistics():
    """A threshold policy on obs[1] is optimal on raw MatchContext observations. Statistics
    that shift obs[1] below (above) the threshold make it always pick 0 (1); since the
    contexts do not depend on the actions, those two returns add up to the optimum."""
    env = MatchContext()
    agent = _probe_agent(greedy=lambda params, obs: (obs[:, 1] > 0.5).astype(jnp.int32))
    evaluate = jax.jit(
        make_evaluator(agent, env, env.default_params, EvalConfig(episodes=6), normalize_obs=True)
    )
    key, ones = jax.random.key(4), jnp.ones(2)

    def stats(mean):
        return NormState(None, jnp.asarray(mean), ones, jnp.float32(1.0))

    identity, _ = evaluate(None, key, 0, stats([0.0, 0.0]))
    zeros, _ = evaluate(None, key, 0, stats([0.0, 1.0]))
    ones_, _ = evaluate(None, key, 0, stats([0.0, -1.0]))
    np.testing.assert_array_equal(identity, np.full(6, 8.0))
    np.testing.assert_array_equal(zeros + ones_, np.full(6, 8.0))
    assert np.all(zeros < 8) and np.all(ones_ < 8)


def test_obs_stats_come_from_a_normalising_env_state():
    assert obs_stats({"not": "normalised"}) is None
    state = NormState(
        env_state=jnp.zeros((4, 2)), mean=jnp.arange(2.0), var=jnp.ones(2), count=jnp.float32(9.0)
    )
    stats = obs_stats(state)
    assert stats.env_state is None
    np.testing.assert_array_equal(stats.mean, state.mean)


def test_evaluator_rejects_bad_arguments():
    env = MatchContext()
    with pytest.raises(ValueError, match="greedy"):
        make_evaluator(_probe_agent(), env, env.default_params, EvalConfig(episodes=2))
    with pytest.raises(ValueError, match="mode"):
        make_evaluator(_probe_agent(), env, env.default_params, EvalConfig(episodes=2, mode="best"))


def test_eval_config_is_validated():
    for override in ("eval.every=-1", "eval.episodes=0", "eval.mode=best", "eval.max_steps=-1"):
        with pytest.raises(jaxrl_async.ConfigError, match=override.split("=")[0]):
            jaxrl_async.load_config("ppo_cartpole", [override])


SMALL = PPO_SMALL
EVAL = ["eval.every=1500", "eval.episodes=4"]
EVAL_KEYS = ("eval_return_mean", "eval_return_std", "eval_episodes", "eval_length_mean")


@pytest.fixture(scope="module")
def eval_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("eval") / "run"
    config = jaxrl_async.load_config("ppo_cartpole", SMALL + EVAL)
    return jaxrl_async.train(config, run_dir=run_dir)


def _numpy(x):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)


@pytest.mark.slow
def test_periodic_eval_logs_at_its_points_and_leaves_training_unchanged(eval_run):
    plain = jaxrl_async.train(jaxrl_async.load_config("ppo_cartpole", SMALL))
    m = eval_run.metrics
    np.testing.assert_array_equal(m["env_steps"], [1024, 2048, 3072, 4096])
    # The first host-call boundary past each multiple of 1500, and the end.
    evaluated = np.array([False, True, True, True])
    np.testing.assert_array_equal(m["eval_episodes"], np.where(evaluated, 4, 0))
    for key in ("eval_return_mean", "eval_return_std", "eval_length_mean"):
        assert np.all(np.isfinite(m[key][evaluated])) and np.all(np.isnan(m[key][~evaluated]))
    # CartPole pays 1 per step: the mean return is the mean length.
    np.testing.assert_array_equal(m["eval_return_mean"], m["eval_length_mean"])
    assert eval_run.summary["eval_return_mean"] == m["eval_return_mean"][-1]
    assert plain.summary["eval_return_mean"] is None
    assert not any(key in plain.metrics for key in EVAL_KEYS)

    assert set(m) - set(plain.metrics) == set(EVAL_KEYS)
    for key in plain.metrics:
        if key not in ("sps", "wall_seconds"):
            np.testing.assert_array_equal(m[key], plain.metrics[key], err_msg=key)
    for x, y in zip(jax.tree.leaves(eval_run.state), jax.tree.leaves(plain.state)):
        np.testing.assert_array_equal(_numpy(x), _numpy(y))

    lines = (eval_run.run_dir / "metrics.jsonl").read_text().splitlines()
    logged = [json.loads(line) for line in lines]
    assert [r["eval_episodes"] for r in logged] == [0, 4, 4, 4]
    assert logged[0]["eval_return_mean"] is None
    summary = json.loads((eval_run.run_dir / "summary.json").read_text())
    assert summary["eval_return_mean"] == m["eval_return_mean"][-1]


@pytest.mark.slow
def test_eval_cli_repeats_the_runs_final_evaluation(eval_run, cli):
    run_dir = eval_run.run_dir
    out = cli("eval", str(run_dir))
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    match = re.fullmatch(
        rf"{re.escape(str(run_dir))}: (\S+) ± (\S+) over 4 episodes "
        r"\(greedy, checkpoint at 4,096 env steps\)",
        line,
    )
    assert match, line
    saved = json.loads((run_dir / "eval.json").read_text())
    assert saved["env_steps"] == 4096 and saved["episodes"] == 4 and len(saved["returns"]) == 4
    # Same checkpoint, seed, episodes and mode as the run's last evaluation: same numbers.
    assert saved["return_mean"] == eval_run.summary["eval_return_mean"]
    assert float(match.group(1)) == pytest.approx(saved["return_mean"], abs=0.01)
    assert saved["return_std"] == pytest.approx(np.std(saved["returns"]))


def test_evaluate_run_options(eval_run):
    result = evaluate_run(eval_run.run_dir, episodes=3, mode="sample", seed=5)
    assert (result["episodes"], result["mode"], result["seed"]) == (3, "sample", 5)
    assert len(result["returns"]) == 3 and all(1 <= n <= 500 for n in result["lengths"])
    assert result["return_mean"] == pytest.approx(np.mean(result["returns"]))
    with pytest.raises(jaxrl_async.ConfigError, match=r"eval.episodes"):
        evaluate_run(eval_run.run_dir, episodes=0)


def test_eval_cli_errors_are_one_line_exit_2(tmp_path):
    code, stderr = run_cli_in_process("eval", str(tmp_path / "missing"), cwd=tmp_path)
    assert code == 2
    assert len(stderr.strip().splitlines()) == 1 and "not found" in stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.yaml").write_text(jaxrl_async.load_config("ppo_cartpole").to_yaml())
    code, stderr = run_cli_in_process("eval", str(empty), cwd=tmp_path)
    assert code == 2
    assert len(stderr.strip().splitlines()) == 1 and "no checkpoint" in stderr
