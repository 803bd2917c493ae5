"""The `jaxrl-async` command: arguments in, a Config and a call into the library out."""

from __future__ import annotations

import argparse
import signal
import sys
import textwrap

from jaxrl_async.errors import DIVERGED_EXIT, RunFailure, TrainingDiverged, UserError


def _train(args) -> int:
    from jaxrl_async.config.loader import load_config
    from jaxrl_async.run import distributed
    from jaxrl_async.training.plan import default_run_dir
    from jaxrl_async.training.trainer import train

    # Several processes join before load_config counts the devices (the mesh spans them all).
    distributed.initialize(args.config, args.overrides)
    config = load_config(args.config, args.overrides)
    run_dir = args.run_dir or default_run_dir(config)
    train(config, run_dir=run_dir)
    return 0


def _plan(args) -> int:
    from jaxrl_async.tools.plan import run

    return run(args)


def _sweep(args) -> int:
    from jaxrl_async.config.loader import load_config
    from jaxrl_async.training.sweeps import default_sweep_dir, finish_sweep, split_overrides, sweep

    plain, grid = split_overrides(args.overrides, lambda o: load_config(args.config, o))
    config = load_config(args.config, plain)
    sweep_dir = args.sweep_dir or default_sweep_dir(config)
    finish_sweep(sweep(config, grid, sweep_dir=sweep_dir))
    return 0


def _sweep_epilog() -> str:
    from jaxrl_async.config.agents import AGENT_CONFIGS

    lines = [f"  {name}: {', '.join(cls.SWEEPABLE)}" for name, cls in AGENT_CONFIGS.items()]
    return (
        textwrap.fill(
            "A list value is a grid axis: agent.learning_rate=[1e-4,3e-4,1e-3], or for a key "
            "that takes a list, a list of lists: agent.hidden_sizes=[[64,64],[256,256]]. "
            "train.num_seeds seeds run per point. These agent keys are swept inside one "
            "compiled program; any other key of env, agent, pipeline or replay compiles one "
            "program per value, run one after another:"
        )
        + "\n"
        + "\n".join(lines)
    )


def _resume(args) -> int:
    from pathlib import Path

    from jaxrl_async.run import distributed
    from jaxrl_async.training.trainer import resume

    if (Path(args.run_dir) / "sweep.yaml").is_file():
        from jaxrl_async.training.sweeps import finish_sweep, resume_sweep

        if args.overrides:
            raise UserError("a sweep resumes as it was configured (no overrides)")
        finish_sweep(resume_sweep(args.run_dir))
        return 0

    # `total_steps=N` (as in `jaxrl-async resume RUN_DIR total_steps=N`) is train.total_steps.
    overrides = [f"train.{o}" if o.split("=", 1)[0] == "total_steps" else o for o in args.overrides]
    # The run's config.yaml holds no launch settings: each session gives its own.
    distributed.initialize(None, overrides)
    resume(args.run_dir, overrides)
    return 0


def _describe(space) -> str:
    """One line per space, whatever its bounds look like."""
    import numpy as np

    if isinstance(getattr(space, "spaces", None), dict):
        return "Dict(" + ", ".join(f"{k}: {_describe(v)}" for k, v in space.spaces.items()) + ")"
    if hasattr(space, "n"):
        return f"Discrete({space.n})"
    if hasattr(space, "low"):
        low, high = np.min(space.low), np.max(space.high)
        return (
            f"Box({tuple(space.shape)}, {np.dtype(space.dtype).name}, "
            f"[{float(low):.4g}, {float(high):.4g}])"
        )
    return " ".join(repr(space).split())


def _envs(args) -> int:
    """Without a suite: the gymnax ids with their spaces, then every suite, whether it
    is installed and its ids. With one (`envs brax`, `envs gymnax`): that suite's ids
    with their spaces (each env is built: a few seconds per suite)."""
    import os

    from jaxrl_async.envs import make, registered_envs, suites

    # A listing never downloads: an env whose data is not cached (Sokoban's levels) is
    # listed as unavailable at once, not after half a minute of retries offline.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from jaxrl_async.host.registry import HOST_LISTINGS

    if args.suite not in (None, "gymnax", *HOST_LISTINGS, *suites.SUITES):
        known = ", ".join(["gymnax", *HOST_LISTINGS, *suites.SUITES])
        raise UserError(f"unknown suite {args.suite!r} ({known})")
    if args.suite in HOST_LISTINGS:
        _print_host(args.suite, listed=True)
        return 0
    if args.suite in (None, "gymnax"):
        _print_spaces(registered_envs(), make)
    if args.suite is None:
        for name, suite in suites.SUITES.items():
            if not suites.installed(name):
                print(f"\n{name}: not installed (pip install 'jaxrl_async[{suite.extra}]')")
                continue
            ids = suites.adapter(name).ids()
            print(
                f"\n{name}: {len(ids)} ids (env.name={name}:<id>; `jaxrl-async envs {name}` "
                f"shows their spaces)"
            )
            print(
                textwrap.fill(
                    ", ".join(ids), width=100, initial_indent="  ", subsequent_indent="  "
                )
            )
        print()
        for host_suite in HOST_LISTINGS:  # one block: Gymnasium's, then EnvPool's
            _print_host(host_suite, listed=False)
    elif args.suite != "gymnax":
        ids = suites.adapter(args.suite).ids()
        _print_spaces([f"{args.suite}:{i}" for i in ids], make)
    return 0


def _print_host(suite: str, listed: bool) -> None:
    """A host suite's ids (Gymnasium's, EnvPool's): all of them when `listed`, else a count."""
    from jaxrl_async.host.registry import HOST_LISTINGS, host_ids

    takes, extra = HOST_LISTINGS[suite]
    ids = host_ids(suite)
    if ids is None:
        print(f"{suite} (host envs): not installed (pip install 'jaxrl_async[{extra}]')")
        return
    print(f"{suite} (host envs): {len(ids)} ids (env.name={takes})")
    if listed:
        print(textwrap.fill(", ".join(ids), width=100, initial_indent="  ", subsequent_indent="  "))
    else:
        print(f"  `jaxrl-async envs {suite}` lists them")


def _print_spaces(names, make) -> None:
    width = max(map(len, names))
    for name in names:
        try:
            env, params = make(name)
            line = (
                f"obs {_describe(env.observation_space(params))}  "
                f"action {_describe(env.action_space(params))}"
            )
        except UserError as e:  # MNISTBandit, Sokoban need a download; list them anyway
            line = f"unavailable: {e}"
        print(f"{name:<{width}}  {line}", flush=True)


def _plot(args) -> int:
    from pathlib import Path

    from jaxrl_async.analysis.plot import is_sweep_dir, plot_runs, plot_sweep

    if any(map(is_sweep_dir, args.run_dirs)):
        if len(args.run_dirs) > 1:
            raise UserError("plot a sweep directory alone (its points are drawn together)")
        print(plot_sweep(args.run_dirs[0], args.out))
        return 0
    out = args.out or (
        Path(args.run_dirs[0]) / "curves.png" if len(args.run_dirs) == 1 else "curves.png"
    )
    print(plot_runs(args.run_dirs, out))
    return 0


def _bench(args) -> int:
    from jaxrl_async.tools.bench import main as bench_main

    return bench_main(args.bench_args)


class _Parser(argparse.ArgumentParser):
    """Usage errors on one line, exit 2, like every other bad input."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


DESCRIPTION = """\
Reinforcement learning in JAX with the semantics of an asynchronous actor-learner
system inside one XLA program: jitted, vmapped env rollouts, device-resident buffers
and a configurable parameter lag between the actor and the learner. Train a shipped
config or a YAML file of your own, changing any setting with section.key=value."""

EPILOG = """\
examples:
  jaxrl-async train                                      # PPO on CartPole-v1 (ppo_cartpole)
  jaxrl-async train ppo_acrobot env.num_envs=16 train.seed=3
  jaxrl-async train ppo_cartpole_async pipeline.lag=2    # the actor two updates behind
  jaxrl-async sweep ppo_cartpole 'agent.learning_rate=[1e-4,3e-4,1e-3]' train.num_seeds=4
  jaxrl-async resume runs/ppo_cartpole-RUN train.total_steps=1e6
  jaxrl-async eval runs/ppo_cartpole-RUN --episodes 100
  jaxrl-async envs                                       # every env id with its spaces

Each command has its own --help (jaxrl-async train --help). Shipped configs are the
files in the package's config/yaml/ directory; settings, env suites, algorithms, devices and
checkpoints are documented in the project's README.md and docs/ (docs/configuration.md
lists every section and key)."""


CONFIG_HELP = "shipped config name or path to a YAML file"


def _add_train(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train a config (default ppo_cartpole)",
        description="Train CONFIG, a shipped config name or a YAML file, with "
        "section.key=value overrides (values are YAML), e.g. "
        "jaxrl-async train ppo_acrobot env.num_envs=16. The run "
        "writes RUN_DIR: config.yaml, metrics.jsonl, TensorBoard "
        "events, checkpoints and summary.json.",
    )
    p.add_argument("config", nargs="?", default="ppo_cartpole", help=CONFIG_HELP)
    p.add_argument("overrides", nargs="*", metavar="section.key=value")
    p.add_argument("--run-dir", default=None, help="default: runs/<config>-<timestamp>")
    p.set_defaults(func=_train)


def _add_plan(sub) -> None:
    p = sub.add_parser("plan", help="a run's devices, batches, bytes per device and programs")
    p.add_argument("config", nargs="?", default="ppo_cartpole", help=CONFIG_HELP)
    p.add_argument("overrides", nargs="*", metavar="section.key=value")
    p.add_argument("--json", action="store_true", help="the plan as JSON")
    p.add_argument("--platform", choices=("cuda",), help="plan for one GPU, its programs exported")
    p.set_defaults(func=_plan)


def _add_sweep(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="train a grid of hyperparameters x seeds, then print the table and plot it",
        epilog=_sweep_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", nargs="?", default="ppo_cartpole", help=CONFIG_HELP)
    p.add_argument("overrides", nargs="*", metavar="section.key=value|[v1,v2,...]")
    p.add_argument("--sweep-dir", default=None, help="default: runs/<config>-sweep-<timestamp>")
    p.set_defaults(func=_sweep)


def _add_resume(sub) -> None:
    p = sub.add_parser("resume", help="continue a run (or a sweep) from its latest checkpoint")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="train.total_steps=N",
        help="extend the run (also train.progress, checkpoint.every/keep)",
    )
    p.set_defaults(func=_resume)


def _add_eval(sub) -> None:
    from jaxrl_async.cli.evaluate import add_eval  # its arguments and dispatch

    add_eval(sub)


def _add_plot(sub) -> None:
    p = sub.add_parser(
        "plot",
        help="learning curves and SPS of run directories, or the "
        "curves of a sweep directory, to a PNG",
    )
    p.add_argument(
        "run_dirs", nargs="+", metavar="RUN_DIR", help="run directories, or one sweep directory"
    )
    p.add_argument(
        "--out",
        default=None,
        help="default: RUN_DIR/curves.png for one run, SWEEP_DIR/sweep.png, else curves.png",
    )
    p.set_defaults(func=_plot)


def _add_envs(sub) -> None:
    p = sub.add_parser("envs", help="list environment ids with their spaces, and the suites")
    p.add_argument(
        "suite",
        nargs="?",
        default=None,
        help="one suite's ids with their spaces (gymnax, brax, jumanji, ...), or "
        "gymnasium's or envpool's ids (host envs)",
    )
    p.set_defaults(func=_envs)


def _add_report(sub) -> None:
    from jaxrl_async.cli.report import add_report  # its arguments and dispatch

    add_report(sub)


def _add_bench(sub) -> None:
    p = sub.add_parser("bench", help="env+policy ceiling and PPO training SPS")
    p.add_argument("bench_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=_bench)


SUBCOMMANDS = [_add_train, _add_plan, _add_sweep, _add_resume, _add_eval, _add_plot]
SUBCOMMANDS += [_add_report, _add_envs, _add_bench]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="jaxrl-async",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in SUBCOMMANDS:  # in the order --help lists them
        add(sub)
    return parser


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # the bench parses its own flags (argparse REMAINDER drops `--x`)
        argv = ["bench", "--", *argv[1:]] if argv[1:2] != ["--"] else argv
    args = build_parser().parse_args(argv)
    # A config name that looks like an override (`train env.num_envs=8`) means "default config".
    if getattr(args, "config", None) and "=" in args.config:
        args.overrides.insert(0, args.config)
        args.config = "ppo_cartpole"
    # Ctrl-C and SIGTERM end a run the same way, also where the parent ignored SIGINT
    # (background jobs of a non-interactive shell): the current host call finishes first.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        import jaxrl_async  # noqa: F401  (sets XLA flags before JAX starts)

        return args.func(args)
    except UserError as e:
        print(f"jaxrl-async: error: {e}", file=sys.stderr)
        return 2
    except TrainingDiverged as e:  # the last finite checkpoint stays; a resume repeats it
        print(f"jaxrl-async: error: {e}", file=sys.stderr)
        return DIVERGED_EXIT
    except RunFailure as e:  # an env failed mid-run: what was checkpointed stays
        hint = f"; resume with: jaxrl-async resume {e.run_dir}" if e.run_dir is not None else ""
        print(f"jaxrl-async: error: {e}{hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        run_dir = getattr(e, "run_dir", None)  # TrainingInterrupted: a checkpoint was saved
        hint = f"; resume with: jaxrl-async resume {run_dir}" if run_dir is not None else ""
        print(f"jaxrl-async: interrupted{hint}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
