"""The `jaxrl-async report` subcommand's arguments and dispatch (the work is report.py's;
imported when the parser is built, so it imports nothing heavy)."""

from __future__ import annotations


def _report(args) -> int:
    from jaxrl_async.report import write_report

    out = write_report(args.dirs, args.group_by, args.out, args.seed)
    print((out / "report.md").read_text(), end="", flush=True)
    print(f"-> {out}/: report.json, report.md, intervals.png, profile.png")
    return 0


def add_report(sub) -> None:
    p = sub.add_parser(
        "report",
        help="final returns of runs or sweeps, grouped: IQM, mean and median with "
        "bootstrap confidence intervals, probability of improvement",
        description="Read the final return of every seed of every run under the given "
        "directories (run directories, sweep directories, or directories holding them), "
        "group them, and write DIR/report.json, report.md, intervals.png (each aggregate "
        "with its 95% stratified-bootstrap confidence interval) and profile.png (the "
        "performance profiles). Envs with reference returns are compared on normalised "
        "scores (0: a random policy), with the optimality gap.",
    )
    p.add_argument("dirs", nargs="+", metavar="RUN_OR_SWEEP_DIR")
    p.add_argument(
        "--group-by",
        default=None,
        metavar="KEY",
        help="group by a config key, e.g. agent.name or pipeline.lag (default: the config "
        "name; a sweep's grid points)",
    )
    p.add_argument("--out", default="report", metavar="DIR", help="default: report/")
    p.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (default 0)")
    p.set_defaults(func=_report)
