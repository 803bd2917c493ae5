"""The measurement harness and the run planner, kept out of the library's core:
`jaxrl-async bench` (bench.py, with its timed loops in measure.py and tables in
bench_report.py), the per-phase profile of a tick (profile.py), and `jaxrl-async plan`
(plan.py, host_plan.py, plan_common.py; gpu_export.py for `--platform cuda`). Figures they
produce live in docs/performance.md."""
