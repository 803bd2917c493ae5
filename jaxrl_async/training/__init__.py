"""The loop around a run's engine: `trainer.py` trains and resumes a JAX env's run through
the XLA pipeline (`loop.py`: its host calls), `host_run.py` a host env's through the
actor-learner executor; both plan with `plan.py`, log with `log.py` and keep their run
directory with `run/`. `sweeps.py` trains a grid's points as seeds of one program."""
