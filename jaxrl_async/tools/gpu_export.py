"""A run's programs exported for a GPU without one, and checked for what would not run there.

`jax.export` lowers a function for platforms other than the one it runs on, so a
CPU-only jaxlib produces the StableHLO a CUDA machine would compile: the run's init and
its training chunk at the run's real shapes (lowering only; nothing is compiled or run).
The check reads that module's text and refuses:

- a custom call that only a CPU runs (LAPACK, DUCC's FFT, anything named for the CPU);
- a host callback in the training chunk (a round trip to Python in every tick);
- float64 or int64 values: JAX without x64 makes none of its own, so one is a constant
  or a lowering that would run a GPU's slow 64-bit path.

Unsigned 64-bit values are allowed: JAX lowers the Philox PRNG's high-half multiply
(`lax.mulhi`) off CPU as a 64-bit product shifted right, its correct GPU form.
"""

from __future__ import annotations

import re

import jax
from jax import export

from jaxrl_async.config.loader import Config
from jaxrl_async.errors import first_line
from jaxrl_async.pipeline.program import seed_keys
from jaxrl_async.training.plan import RunPlan

CUSTOM_CALL = re.compile(r"custom_call @([\w.$-]+)")
WIDE_TYPE = re.compile(r"tensor<(?:[0-9?]+x)*(f64|i64|complex<f64>)>")
# An attribute's own type (`replica_groups = dense<0> : tensor<1x1xi64>`) is no value.
ATTRIBUTE = re.compile(r"= dense<[^>]*> : tensor<[^>]*>")
CPU_ONLY = ("lapack", "ducc", "cpu")
CALLBACK = "callback"


def check_module(text: str, program: str) -> tuple[list[str], list[str]]:
    """(custom call targets, problems) of an exported module's StableHLO text; `program`
    "chunk" is the training program, where host callbacks are refused too."""
    targets = sorted(set(CUSTOM_CALL.findall(text)))
    problems = []
    cpu = [t for t in targets if any(word in t.lower() for word in CPU_ONLY)]
    if cpu:
        problems.append(f"CPU-only custom call {', '.join(cpu)}")
    callbacks = [t for t in targets if CALLBACK in t.lower() and t not in cpu]
    if callbacks and program == "chunk":
        problems.append(f"host callback {', '.join(callbacks)} in the training program")
    wide = sorted(set(WIDE_TYPE.findall(ATTRIBUTE.sub("", text))))
    if wide:
        problems.append(f"64-bit values ({', '.join(wide)}) with x64 off")
    return targets, problems


def export_program(fun, args, platform: str, program: str, donate: bool = False) -> dict:
    """One program exported for `platform` and checked: custom calls and problems."""
    jitted = jax.jit(fun, donate_argnums=0) if donate else jax.jit(fun)
    try:
        exported = export.export(jitted, platforms=[platform])(*args)
    except Exception as e:  # noqa: BLE001  (whatever fails to lower is the finding)
        return {"custom_calls": [], "problems": [f"does not lower: {first_line(e)}"]}
    targets, problems = check_module(exported.mlir_module(), program)
    return {"custom_calls": targets, "problems": problems}


def export_run(config: Config, plan: RunPlan, built, platform: str) -> dict:
    """The run's init and chunk exported for `platform` at the run's shapes, each with its
    custom calls and problems; `built` is the run as `trainer.build` makes it for a
    fused layout (the one a single GPU takes)."""
    seeds = config.train.num_seeds
    key = jax.eval_shape(
        lambda: (
            jax.random.key(config.train.seed, impl=config.prng_impl)
            if seeds == 1
            else seed_keys(config.train.seed, seeds, config.prng_impl)
        )
    )
    pipeline = built.pipeline
    state = jax.eval_shape(pipeline.init, key)  # laid out as init lays it out
    return {
        "platform": platform,
        "programs": {
            "init": export_program(pipeline.init, (key,), platform, "init"),
            "chunk": export_program(pipeline.chunk(plan.ticks), (state,), platform, "chunk", True),
        },
    }
