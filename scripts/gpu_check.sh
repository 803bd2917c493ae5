#!/usr/bin/env bash
# GPU check: one prepared run of scripts/gpu_check.py's items (plan; PPO CartPole at 2,048
# and 8,192 envs; PPO and PQN on Breakout-MinAtar; Brax halfcheetah; DQN with prioritized
# replay at 1e6 capacity; a 64-point sweep; a Gymnasium host-env config), each in its own
# process under its own timeout, all within BUDGET seconds (default 420, so that with the
# machine's start it fits in 8 minutes). A failed item is recorded, not fatal.
# Installs nothing: run it from the repo root where `python` has jax with its GPU plugin
# (PYTHON=... to choose the interpreter). Writes ${OUT:-gpu_check}/gpu_check.json; then
# `python scripts/gpu_results.py OUT/gpu_check.json` puts its table into docs/RESULTS.md.
# Extra arguments go to gpu_check.py (--tiny: the same items at tiny budgets, on any machine).
set -u
PY=${PYTHON:-python}
OUT_DIR=${OUT:-gpu_check}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" scripts/gpu_check.py --out "$OUT_DIR" --budget "${BUDGET:-420}" "$@"
