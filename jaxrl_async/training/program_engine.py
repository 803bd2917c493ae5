"""The engine of a JAX env's run: the compiled XLA program (`pipeline/`), a host call one
chunk of `plan.ticks` ticks, seeds side by side in one program, any lag, any mesh.

Built: the pipeline(s) over the layout's mesh (split: the actors' and the learner's), the
agent, the periodic evaluation (its own keys, so training does not change with it).
Started: the chunk compiled (the evaluation beside it, in a worker thread), then the state
initialised, or a resumed run's checkpoint restored into a fresh state's layout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import jax

from jaxrl_async.config.loader import Config
from jaxrl_async.evaluation.evaluate import Evaluation
from jaxrl_async.pipeline.build import build_pipeline
from jaxrl_async.pipeline.footprint import check_run_fits
from jaxrl_async.pipeline.program import (
    DETERMINISTIC_OPTIONS,
    compile_chunk,
    init_and_compile,
    seed_keys,
    vmap_seeds,
)
from jaxrl_async.pipeline.sharding import make_mesh
from jaxrl_async.pipeline.split import init_and_compile_split, split_meshes
from jaxrl_async.run import checkpoint as ckpt
from jaxrl_async.run import rundir
from jaxrl_async.run.compile_cache import CACHE
from jaxrl_async.training.engine import Advanced, EngineKind, Untimed
from jaxrl_async.training.hparams import RunGroup, learner_with_hparams
from jaxrl_async.training.plan import RunPlan


class ProgramEngine:
    """A JAX env's run (`engine.Engine`): see the module's docstring."""

    kind: EngineKind = "jax"
    on_interrupt = None  # a chunk is never waited on mid-way: the loop stops between calls

    def __init__(
        self,
        config: Config,
        plan: RunPlan,
        env=None,
        env_params=None,
        group: RunGroup | None = None,
    ):
        self.config, self.plan, self.group = config, plan, group
        layout, self.learner_pipeline = plan.layout, None
        if layout.placement == "split":
            actor_mesh, learner_mesh = split_meshes(layout.devices, layout.actor_devices)
            self.pipeline, _ = build_pipeline(config, env, env_params, plan.num_updates, actor_mesh)
            self.learner_pipeline, self.agent = build_pipeline(
                config, env, env_params, plan.num_updates, learner_mesh
            )
            self.devices = [*actor_mesh.devices.flat, *learner_mesh.devices.flat]
        else:
            self.pipeline, self.agent = build_pipeline(
                config, env, env_params, plan.num_updates, make_mesh(layout.devices)
            )
            self.devices = list(self.pipeline.mesh.devices.flat)
            if config.train.num_seeds > 1:  # seeds side by side in one program
                self.pipeline = vmap_seeds(self.pipeline)
        self.evaluation = (
            _evaluation_class(config)(
                config,
                self.agent,
                env,
                env_params,
                device=self.devices[0] if jax.process_count() == 1 else None,
            )
            if config.eval.every > 0
            else None
        )
        # refused before anything is allocated
        check_run_fits(config, (self.pipeline, self.learner_pipeline), self.devices)
        self.checkpoint_devices = layout.devices
        self.compile_seconds = self.restore_seconds = 0.0
        self.cache_hits = self.cache_misses = 0

    def start(self, run_dir: Path | None, warn: Callable[[str], None]):
        """Compile the chunk (and the evaluation, in a worker thread), then init the state,
        or restore it from the resume point's checkpoint into a fresh state's layout."""
        compile_start, hits, misses = time.perf_counter(), CACHE.hits, CACHE.misses
        if self.evaluation is not None:
            self.evaluation.start_compile()  # in a worker thread, next to the training program
        config, plan, pipeline = self.config, self.plan, self.pipeline
        options = DETERMINISTIC_OPTIONS if config.train.deterministic else None
        key = self._key()
        if self.learner_pipeline is not None:  # split placement
            state, self.chunk = init_and_compile_split(
                pipeline, self.learner_pipeline, key, plan.ticks, options
            )
        elif plan.point is None:
            state, self.chunk = init_and_compile(pipeline, key, plan.ticks, options)
            if self.group is not None:
                learner = learner_with_hparams(state.learner, self.group.hparams)
                state = state.replace(learner=learner)
        else:  # the checkpoint supplies the state: init is traced for its layout, never run
            state = jax.jit(pipeline.init).lower(key).out_info
        if plan.point is not None:
            assert run_dir is not None  # a resume point is read from the run directory
            like, restore_start = state, time.perf_counter()
            state, _ = ckpt.restore(rundir.checkpoint_dir(run_dir), like, step=plan.point.step)
            self.restore_seconds = time.perf_counter() - restore_start
            if plan.layout.placement != "split":
                self.chunk = compile_chunk(pipeline.chunk(plan.ticks), like, options)
        if self.evaluation is not None:
            self.evaluation.wait_compiled()
        self.compile_seconds = time.perf_counter() - compile_start - self.restore_seconds
        self.cache_hits, self.cache_misses = CACHE.hits - hits, CACHE.misses - misses
        return state

    def _key(self) -> jax.Array:
        config, group = self.config, self.group
        if config.train.num_seeds == 1:
            return jax.random.key(config.train.seed, impl=config.prng_impl)
        seeds = None if group is None else group.seeds
        return seed_keys(config.train.seed, config.train.num_seeds, config.prng_impl, seeds)

    def advance(self, state) -> Advanced:
        """One chunk, dispatched: it runs while the loop logs the last one."""
        return Advanced(*self.chunk(state))

    def checkpoint(self, state):
        return state

    def evaluate(self, state, env_steps: int) -> dict:
        assert self.evaluation is not None
        return self.evaluation(state, env_steps)

    def untimed(self) -> Untimed:
        return Untimed()  # compiled before the loop: its time is compile_seconds

    def result_state(self, state):
        return state

    def closing_lines(self) -> list[str]:
        return [self.plan.layout.line()]  # the layout's reasons: `jaxrl-async plan`

    def summary_fields(self, state) -> dict:
        layout = self.plan.layout
        return {
            "updates": self.plan.num_updates,
            "compile_cache_hits": self.cache_hits,
            "compile_cache_misses": self.cache_misses,
            "restore_seconds": self.restore_seconds,
            "device_choice": layout.devices_why,
            "placement_choice": layout.placement_why,
        }

    def close(self) -> None:
        pass


def _evaluation_class(config: Config) -> type[Evaluation]:
    """Evaluation, or with eval.video the one that also records (evaluation/periodic.py)."""
    if not config.eval.video:
        return Evaluation
    from jaxrl_async.evaluation.periodic import RecordingEvaluation

    return RecordingEvaluation
