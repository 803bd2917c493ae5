"""The loop around a run's engine: train and resume (`trainer.py`), the loop over host calls
(`loop.py`) with its logs and sinks, checkpoints and restore, the run directory,
divergence, interrupts, the compile cache, several processes, and sweeps."""
