"""The XLA program of a JAX-env run: the actor's rollout, the tick that joins it to the
learner through a queue of parameters `pipeline.lag` updates old, the state they carry,
and their layout over the devices (one mesh, or the actor's and the learner's apart).

`program.py` builds a run's programs from an agent and a batched env; `build.py` builds
them for a config; `layout.py` chooses the devices and placement; `footprint.py` counts
the device memory a run needs before anything is allocated.
"""
