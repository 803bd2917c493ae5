"""The GPU programs checked without a GPU: shipped configs' init and training chunk
exported for CUDA with jax.export at the run's real shapes, and refused where a GPU
could not run them; CPU-only XLA options and flags stay on CPU.

What a CUDA export can refuse (a host callback, a CPU-only custom call, a 64-bit value)
comes from the ops of an env or of an agent's programs, not from sizes or learning rates:
the exported configs are a set that holds every JAX env id and every agent program variant
of the shipped configs (`_variants`), which a test keeps complete. Host-env configs export
their learner's init only, so they are all exported and count for no agent variant."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async
from jaxrl_async import _xla_flags
from jaxrl_async.config.loader import available_configs
from jaxrl_async.errors import UserError
from jaxrl_async.pipeline.program import init_options
from jaxrl_async.tools.gpu_export import check_module, export_program, export_run
from jaxrl_async.tools.plan import PLATFORMS, make_plan
from jaxrl_async.training.plan import plan_run
from jaxrl_async.training.trainer import build


def _problems(name: str) -> dict:
    """{program: problems} of shipped config `name` exported for CUDA (as `plan --platform
    cuda` exports it, without the byte count); skipped where its env suite is not
    installed. A host-env config exports its learner's init only (its envs are numpy)."""
    config = jaxrl_async.load_config(name)
    try:
        if config.env.host:
            export = make_plan(config, "cuda")["export"]
        else:
            plan = plan_run(config, None, False, PLATFORMS["cuda"])
            export = export_run(config, plan, build(config, plan), "cuda")
    except UserError as e:
        if "pip install" in str(e) or "not installed" in str(e):
            pytest.skip(str(e))
        raise
    programs = export["programs"]
    assert set(programs) == ({"learner init"} if config.env.host else {"init", "chunk"})
    return {program: found["problems"] for program, found in programs.items()}


def test_a_small_config_exports_for_cuda():
    """ppo_cartpole's plan for one GPU: fused on its one device, both programs clean."""
    plan = make_plan(jaxrl_async.load_config("ppo_cartpole"), "cuda")
    assert plan["devices"]["line"] == "devices: 1 GPU, fused"
    assert plan["memory"] is None  # no GPU here to measure against
    programs = plan["export"]["programs"]
    assert {k: v["problems"] for k, v in programs.items()} == {"init": [], "chunk": []}
    assert all(not t.startswith("lapack") for t in programs["init"]["custom_calls"])


# Every JAX env id and agent program variant of the shipped configs, each at least once;
# plus every host-env config.
EXPORTED = (
    "dqn_atari_breakout",
    "dqn_breakout_minatar",
    "dqn_deepsea",
    "dqn_mountaincar",
    "impala_atari_breakout",
    "impala_cartpole",
    "ppo_acrobot",
    "ppo_atari_breakout",
    "ppo_brax_halfcheetah",
    "ppo_cartpole_async",
    "ppo_catch",
    "ppo_craftax_classic",
    "ppo_freeway_minatar",
    "ppo_gymnasium_cartpole",
    "ppo_halfcheetah",
    "ppo_jumanji_snake",
    "ppo_navix_empty",
    "ppo_rnn_memory_chain",
    "ppo_rnn_navix_empty_random_16x16",
    "ppo_spaceinvaders_minatar",
    "ppo_xminigrid_empty",
    "pqn_asterix_minatar",
    "r2d2_cartpole_masked",
    "r2d2_gymnasium_cartpole",
    "sac_halfcheetah",
    "sac_pendulum",
    "td3_brax_inverted_pendulum",
)


def _variants(config) -> set[tuple]:
    """What a config's exported programs are made of, beyond sizes: its env (a JAX env's
    ops) and its agent's program variant (agent, memory, torso, a lag queue, the replay)."""
    if config.env.host:
        return set()
    agent = config.agent
    variant = (agent.name, getattr(agent, "memory", None), getattr(agent, "torso", None))
    variant += (getattr(agent, "shared_torso", None), config.pipeline.lag > 0)
    variant += (config.replay.kind if agent.off_policy else None,)
    return {("env", config.env.name), ("agent", *variant)}


def test_the_exported_configs_hold_every_env_and_agent_variant():
    configs = {name: jaxrl_async.load_config(name) for name in available_configs()}
    assert set(EXPORTED) <= set(configs)
    exported = set().union(*(_variants(configs[name]) for name in EXPORTED))
    for name, config in configs.items():
        assert _variants(config) <= exported, f"{name}: add it to EXPORTED"
        assert not config.env.host or name in EXPORTED, f"{name}: add it to EXPORTED"


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPORTED)
def test_shipped_configs_export_for_cuda(name):
    problems = _problems(name)
    assert problems and not any(problems.values()), problems


def test_host_callback_in_the_training_program_is_refused():
    """A host callback does not even lower for CUDA on a CPU machine (the callback is
    bound to this backend); in a module that has one, the chunk is refused, init is not."""

    def chunk(x):
        return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x) + 1

    found = export_program(chunk, (jax.ShapeDtypeStruct((4,), jnp.float32),), "cuda", "chunk")
    assert found["problems"] and found["problems"][0].startswith("does not lower")
    text = "%0 = stablehlo.custom_call @xla_ffi_python_gpu_callback(%arg0)"
    targets, problems = check_module(text, "chunk")
    assert targets == ["xla_ffi_python_gpu_callback"]
    assert problems == ["host callback xla_ffi_python_gpu_callback in the training program"]
    assert check_module(text, "init")[1] == []


def test_cpu_only_custom_calls_and_64_bit_values_are_refused():
    """LAPACK's QR, as lowered for a CPU, is refused; so are f64/i64 values, but not an
    attribute's own i64 type, nor the ui64 of Philox's high-half multiply."""
    x = jax.ShapeDtypeStruct((8, 8), jnp.float32)
    found = export_program(lambda a: jnp.linalg.qr(a)[0], (x,), "cpu", "init")
    assert any("CPU-only custom call lapack" in p for p in found["problems"])
    clean = export_program(lambda a: jnp.linalg.qr(a)[0], (x,), "cuda", "init")
    assert clean["problems"] == [] and clean["custom_calls"]
    text = (
        "%0 = stablehlo.constant dense<32> : tensor<ui64>\n"
        '"stablehlo.all_reduce"(%1) <{replica_groups = dense<0> : tensor<1x1xi64>}>\n'
    )
    assert check_module(text, "chunk") == ([], [])
    wide = check_module(text + "%2 = stablehlo.convert %1 : (tensor<4xf32>) -> tensor<4xf64>", "")
    assert wide[1] == ["64-bit values (f64) with x64 off"]


def test_cpu_only_xla_options_and_flags_apply_on_cpu_only(monkeypatch):
    """Init's fast-compile options are CPU ones on CPU and none on a GPU; the flags set on
    import name the CPU backend only (XLA's other backends ignore them)."""
    cpu, cuda = init_options("cpu"), init_options("cuda", {"xla_gpu_deterministic_ops": True})
    assert cpu["xla_cpu_use_fusion_emitters"] is False and "xla_backend_optimization_level" in cpu
    assert cuda == {"xla_gpu_deterministic_ops": True}
    monkeypatch.delenv("JAXRL_ASYNC_KEEP_XLA_FLAGS", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "")
    monkeypatch.setattr(_xla_flags, "cpu_cores", lambda: 4)
    _xla_flags.apply_default_xla_flags()
    flags = [f.split("=")[0] for f in os.environ["XLA_FLAGS"].split()]
    assert flags and all(
        f.startswith("--xla_cpu_") or f == "--xla_force_host_platform_device_count" for f in flags
    )
