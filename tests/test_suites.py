"""The contract every env suite's adapter keeps (`env.name=<suite>:<id>`), once for all of
them: the env passes check_env and its id is listed; reset and step give states of the
same types (so a scan can carry them); an unknown id or keyword is a one-line ConfigError;
the suite has a `direct` baseline for bench. Each tests/test_suite_<name>.py checks what
is the suite's own: the adapter against the suite's reset and step, its episode ends, its
ids and errors, and PPO learning one of its envs by name."""

import jax
import jax.numpy as jnp
import pytest

from jaxrl_async.envs import suites
from jaxrl_async.envs.spec import check_env
from jaxrl_async.errors import ConfigError
from jaxrl_async.tools.bench import has_direct

# (suite, module it needs, env id, keywords): a small, quick env of each suite.
SUITES = [
    pytest.param(
        "brax", "brax", "inverted_pendulum", {"backend": "spring", "episode_length": 6}, id="brax"
    ),
    pytest.param("craftax", "craftax", "Craftax-Classic-Symbolic-v1", {}, id="craftax"),
    pytest.param("jumanji", "jumanji", "Snake-v1", {}, id="jumanji"),
    pytest.param("navix", "navix", "Navix-Empty-5x5-v0", {}, id="navix"),
    pytest.param("xminigrid", "xminigrid", "MiniGrid-Empty-5x5", {}, id="xminigrid"),
]


@pytest.mark.parametrize("suite, module, env_id, kwargs", SUITES)
def test_the_env_passes_check_env_and_its_id_is_listed(suite, module, env_id, kwargs):
    pytest.importorskip(module)
    env, params = suites.make(f"{suite}:{env_id}", **kwargs)
    check_env(env, params)
    assert env_id in suites.adapter(suite).ids()


@pytest.mark.parametrize("suite, module, env_id, kwargs", SUITES)
def test_reset_and_step_states_have_the_same_types(suite, module, env_id, kwargs):
    pytest.importorskip(module)
    env, params = suites.make(f"{suite}:{env_id}", **kwargs)
    keys = jax.random.split(jax.random.key(0))
    space = env.action_space(params)
    action = jnp.zeros(space.shape, space.dtype)
    _, state = jax.eval_shape(env.reset, keys[0], params)
    stepped = jax.eval_shape(env.step, keys[1], state, action, params)[1]
    assert [(x.shape, x.dtype, x.weak_type) for x in jax.tree.leaves(state)] == [
        (x.shape, x.dtype, x.weak_type) for x in jax.tree.leaves(stepped)
    ]


@pytest.mark.parametrize("suite, module, env_id, kwargs", SUITES)
def test_an_unknown_id_or_keyword_is_a_one_line_config_error(suite, module, env_id, kwargs):
    pytest.importorskip(module)
    for name, extra, match in [
        (f"{suite}:No-Such-Env-v0", {}, f"unknown {suite} env"),
        (f"{suite}:{env_id}", {"nope": 1}, "nope"),
    ]:
        with pytest.raises(ConfigError, match=match) as info:
            suites.make(name, **{**kwargs, **extra})
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("suite, module, env_id, kwargs", SUITES)
def test_the_suite_has_a_direct_baseline(suite, module, env_id, kwargs):
    pytest.importorskip(module)
    assert has_direct(f"{suite}:{env_id}")
