"""The `jaxrl-async report` subcommand's arguments and dispatch (the work is analysis/report.py's;
imported when the parser is built, so it imports nothing heavy)."""

from __future__ import annotations


def _report(args) -> int:
    import json
    import sys

    from jaxrl_async.analysis.report import FIGURES, format_markdown
    from jaxrl_async.analysis.report_files import write_report

    out = write_report(args.dirs, args.group_by, args.out, args.seed)
    report = json.loads((out / "report.json").read_text())
    # report.md as written, less its warning line: that goes to stderr.
    print(format_markdown(report, FIGURES, warnings=False), end="", flush=True)
    print(f"-> {out}/: report.json, report.md, {', '.join(FIGURES)}", flush=True)
    if report["warnings"]:
        print(f"warning: {'; '.join(report['warnings'])}", file=sys.stderr, flush=True)
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
        "performance profiles). Each group's raw final returns are aggregated per env; "
        "where every env has reference returns, groups are compared on normalised scores "
        "(0: a random policy), with the optimality gap.",
    )
    p.add_argument("dirs", nargs="+", metavar="RUN_OR_SWEEP_DIR")
    p.add_argument(
        "--group-by",
        default=None,
        metavar="KEY",
        help="group by the value of one config key, e.g. agent.name or pipeline.lag, and "
        "warn where a group holds runs of one env whose configs differ otherwise (default: "
        "one group per experiment, i.e. per config.yaml less the seed and the keys that "
        "change no result, named by the keys that differ between groups)",
    )
    p.add_argument("--out", default="report", metavar="DIR", help="default: report/")
    p.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (default 0)")
    p.set_defaults(func=_report)
