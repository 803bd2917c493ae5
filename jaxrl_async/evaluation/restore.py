"""A JAX-env run's latest checkpoint, restored for what runs it again (`eval`, videos)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax

from jaxrl_async.config.loader import Config
from jaxrl_async.pipeline.build import build_pipeline
from jaxrl_async.run import checkpoint as ckpt
from jaxrl_async.run import rundir


def restore_run(run_dir: Path, config: Config, env=None, env_params=None):
    """(step, state, agent, config) of the run's latest checkpoint: the PipelineState as
    saved, the agent built for it, and `config` with the checkpoint's PRNG implementation.
    `env`/`env_params`: the env a run trained on a custom env used."""
    step, info = ckpt.read_meta(rundir.checkpoint_dir(run_dir))
    impl = info.get("prng_impl", config.prng_impl)
    pipeline, agent = build_pipeline(config, env, env_params)
    # The checkpoint's layout, traced from init (nothing runs), then the checkpoint itself.
    like = jax.jit(pipeline.init).lower(jax.random.key(config.train.seed, impl=impl)).out_info
    state, _ = ckpt.restore(rundir.checkpoint_dir(run_dir), like, step=step)
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, prng=impl))
    return step, state, agent, config
