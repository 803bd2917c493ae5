"""The measurement harness, kept out of the library's core: `jaxrl-async bench` (bench.py,
with its timed loops in measure.py and tables in bench_report.py) and the per-phase
profile of a tick (profile.py). Figures they produce live in docs/performance.md."""
