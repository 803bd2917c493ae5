"""The run loop, written once, over the engine a config picks: `trainer.py` trains and
resumes a run, `engine.py` names what an engine gives the loop and picks one,
`program_engine.py` (a JAX env, stepped in the compiled XLA pipeline) and
`host_engine.py` (a host env, stepped by actor threads) are the two; `loop.py` advances
one a host call at a time and logs (`log.py`), evaluates and checkpoints between calls;
`plan.py` plans, `summary.py` writes the one summary, and `sweeps.py` trains a grid's
points as seeds of one program."""
