"""The `jaxrl-async eval` subcommand's arguments and dispatch (the work is evaluation/evaluate.py's,
and video/'s with --video; imported when the parser is built, so it imports nothing heavy)."""

from __future__ import annotations


def _eval(args) -> int:
    if args.video:
        from jaxrl_async.evaluation import record_video

        r = record_video(args.run_dir, args.video, args.episodes, args.mode, args.seed)
        shown = r["video_episodes"]
        print(
            f"video: {r['video']} ({shown} episode{'s' if shown > 1 else ''} of "
            f"{r['episodes']} evaluated, {r['frames']:,} frames)"
        )
    else:
        from jaxrl_async.evaluation.evaluate import evaluate_run

        r = evaluate_run(args.run_dir, args.episodes, args.mode, args.seed)
    print(
        f"{args.run_dir}: {r['return_mean']:.2f} ± {r['return_std']:.2f} over {r['episodes']} "
        f"episodes ({r['mode']}, checkpoint at {r['env_steps']:,} env steps)"
    )
    return 0


def add_eval(sub) -> None:
    p = sub.add_parser("eval", help="evaluate a run's latest checkpoint (also RUN_DIR/eval.json)")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--episodes", type=int, default=None, help="default: the run's eval.episodes")
    p.add_argument(
        "--mode",
        choices=("greedy", "sample"),
        default=None,
        help="the greedy (mean) action or the policy's own sampling; default: the run's eval.mode",
    )
    p.add_argument("--seed", type=int, default=None, help="default: the run's train.seed")
    p.add_argument(
        "--video",
        metavar="PATH",
        help="also render the evaluation's first episode to PATH (.gif or .mp4), or with "
        "--episodes N all N (docs/operations.md#videos)",
    )
    p.set_defaults(func=_eval)
