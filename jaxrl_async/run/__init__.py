"""What a run keeps and the process it runs in, for either engine: its directory read
back (`rundir.py`), checkpoints (`checkpoint.py`), the record sinks (`sinks.py`) and
Weights & Biases (`tracking.py`), the divergence check, Ctrl-C between calls, the
persistent compile cache and several processes."""
