"""What a run's results say: statistics with bootstrap intervals, `jaxrl-async report`,
plots of runs and sweeps, the sweep table and the envs' reference returns."""
