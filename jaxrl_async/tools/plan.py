"""`jaxrl-async plan CONFIG [overrides]`: a run resolved without training.

The plan is what `train` would do on this machine: the devices and placement with the
reasons for them (a run itself prints one short line), the batches each device holds,
the bytes per device of every part of the state (`pipeline/footprint.py`, the count `train` checks
before allocating), the host calls, the compiled programs and the checkpoint's size.
With `--platform cuda` the run is planned for one GPU and its programs are exported for
CUDA and checked (`tools/gpu_export.py`).
"""

from __future__ import annotations

import json

from jaxrl_async.config.loader import Config, engine_kind, load_config
from jaxrl_async.pipeline import footprint as memory
from jaxrl_async.pipeline.layout import Layout, Machine, learner_rows
from jaxrl_async.tools.plan_common import common_plan, memory_fits
from jaxrl_async.training.plan import RunPlan, plan_run

# The machine `--platform` plans for: its layout rules, one device.
PLATFORMS = {"cuda": Machine("gpu", 1)}


def make_plan(config: Config, platform: str | None = None) -> dict:
    """The plan of `config` as a JSON-able dict; `platform` ("cuda") plans for one GPU and
    adds the export check of the run's programs for it."""
    if engine_kind(config) == "host":
        from jaxrl_async.tools.host_plan import host_plan

        return host_plan(config, platform)
    from jaxrl_async.training.trainer import build

    machine = PLATFORMS[platform] if platform else None
    plan = plan_run(config, None, False, machine)
    built = build(config, plan)
    footprint = memory.run_footprint(config, (built.pipeline, built.learner_pipeline))
    result = common_plan(config, plan, footprint, _programs(config, plan))
    result["batches"] = _batches(config, plan.layout)
    result["memory"] = memory_fits(footprint, built.devices if platform is None else None)
    if platform is not None:
        from jaxrl_async.tools.gpu_export import export_run

        result["export"] = export_run(config, plan, built, platform)
    return result


def _batches(config: Config, layout: Layout) -> dict:
    """What each device holds of one seed's batches (split: the learner's devices for the
    learner's batches, the actors' for the envs)."""
    actors = layout.actor_devices or layout.devices
    envs = config.env.num_envs // actors
    batches: dict = {
        "seeds": config.train.num_seeds,
        "envs": envs,
        "trajectory": [config.pipeline.rollout_len, envs],
        "rows_per_gradient_step": learner_rows(config)
        // config.train.num_seeds
        // layout.learner_devices,
    }
    if config.agent.off_policy:
        batches["replay_capacity"] = config.replay.capacity // layout.learner_devices
        batches["replay_batch"] = config.replay.batch_size // layout.learner_devices
    return batches


def _programs(config: Config, plan: RunPlan) -> list[str]:
    """The programs a fresh run compiles (a resumed one: the same but init, which is traced
    for the checkpoint's layout and never compiled)."""
    layout, chunk = plan.layout, f"chunk of {plan.ticks} ticks"
    if layout.placement == "fused":
        programs = ["init", chunk]
    elif not config.agent.off_policy and layout.devices == 2:
        programs = ["init", f"{chunk} (actor and learner devices)"]
    else:
        programs = ["actor init", "learner init", "act", "queue push", "queue oldest", "learn"]
        programs += ["replay window"] if config.agent.off_policy else []
    return programs + (["evaluation"] if config.eval.every > 0 else [])


def format_plan(plan: dict) -> str:
    """The plan as text, one fact a line."""
    d, b = plan["devices"], plan.get("batches", {})
    lines = [
        f"{plan['config']}: {plan['agent']} on {plan['env']}, {plan['env_steps']:,} env steps",
        d["line"],
        f"  devices: {d['devices_why']}",
        f"  placement: {d['placement_why']}",
    ]
    if b:
        each = f" (each of {b['seeds']} seeds)" if b["seeds"] > 1 else ""
        lines.append(f"per device{each}: " + ", ".join(_batch_words(b)))
    lines.append("bytes per device:")
    parts = plan["bytes_per_device"]
    lines += [f"  {name:<16} {memory.gib(n):>10}" for name, n in parts.items()]
    fits = plan.get("memory")
    if fits is not None:
        verdict = "fits" if fits["fits"] else "does NOT fit"
        lines[-1] += f"  of {fits['what']}: {verdict}"
    lines += plan.get("not_counted", [])
    calls = f"host calls: {plan['host_calls']:,} of {plan['ticks_per_call']:,} ticks"
    if "not_counted" in plan:  # a host-env run: its "host calls" are the executor's rounds
        calls = f"rounds: {plan['host_calls']:,}, one update each"
    lines.append(f"{calls} ({plan['env_steps_per_call']:,} env steps each)")
    lines.append(f"compiled programs: {len(plan['programs'])} ({', '.join(plan['programs'])})")
    lines.append(f"checkpoint: {memory.gib(plan['checkpoint_bytes'])}")
    lines += _export_lines(plan.get("export"))
    return "\n".join(lines)


def _batch_words(b: dict) -> list[str]:
    words = [f"{b['envs']:,} envs", f"trajectory [{b['trajectory'][0]}, {b['trajectory'][1]}]"]
    words.append(f"{b['rows_per_gradient_step']:,} rows per gradient step")
    if "actor_threads" in b:  # a host env's actors: threads, or processes of their own
        words.append(actors_words(b["actor_threads"], b.get("actor_processes", False)))
    if "replay_capacity" in b:
        words.append(f"replay {b['replay_capacity']:,} transitions, batch {b['replay_batch']:,}")
    return words


def actors_words(count: int, processes: bool) -> str:
    """A host run's actors in words: "1 actor thread", "2 actor processes"."""
    if processes:
        return f"{count} actor process{'' if count == 1 else 'es'}"
    return f"{count} actor thread{'' if count == 1 else 's'}"


def _export_lines(export: dict | None) -> list[str]:
    if export is None:
        return []
    lines = [f"exported for {export['platform']}:"]
    for name, program in export["programs"].items():
        status = "ok" if not program["problems"] else "; ".join(program["problems"])
        calls = ", ".join(program["custom_calls"]) or "none"
        lines.append(f"  {name}: {status} (custom calls: {calls})")
    lines += [f"  {note}" for note in export.get("notes", [])]
    return lines


def run(args) -> int:
    """`jaxrl-async plan`: print the plan (text, or JSON with args.json); exit 1 where an
    exported program would not run on `args.platform`."""
    plan = make_plan(load_config(args.config, args.overrides), args.platform)
    print(json.dumps(plan, indent=2) if args.json else format_plan(plan))
    export = plan.get("export")
    bad = export is not None and any(p["problems"] for p in export["programs"].values())
    return 1 if bad else 0


__all__ = ["PLATFORMS", "format_plan", "make_plan", "run"]
