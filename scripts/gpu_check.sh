#!/usr/bin/env bash
# GPU check: the SPS bench and the CartPole learning check on an accelerator, in < 8 min.
# Installs nothing: run it from the repo root where `python` has jax with its GPU plugin
# and the project importable (PYTHON=... to choose the interpreter). Writes
# ${OUT:-gpu_check}/table.md with the bench table and the learning results.
set -u
PY=${PYTHON:-python}
OUT_DIR=${OUT:-gpu_check}
mkdir -p "$OUT_DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  echo "# GPU check $(date -u +%FT%TZ)"
  $PY -c 'import jax; print("jax", jax.__version__, "devices", jax.devices())'
  echo
  echo "## SPS bench (ceiling vs PPO training)"
  timeout 240 $PY -m jaxrl_async bench --envs 4,64,512,2048 --repeats 3 --seconds 2 \
    --json "$OUT_DIR/bench.json" 2>"$OUT_DIR/bench.err" || echo "bench failed: rc=$?"
  echo
  echo "## Learning check (PPO CartPole, sync and lag 1, 3 seeds)"
  echo "| config | seed | final return | SPS | compile s |"
  echo "| --- | ---: | ---: | ---: | ---: |"
  for cfg in ppo_cartpole ppo_cartpole_async; do
    for seed in 0 1 2; do
      timeout 60 $PY - "$cfg" "$seed" <<'PYEOF' || echo "| $cfg | $seed | failed | | |"
import sys, jaxrl_async
cfg, seed = sys.argv[1], sys.argv[2]
s = jaxrl_async.train(jaxrl_async.load_config(cfg, [f"train.seed={seed}", "train.progress=false"])).summary
print(f"| {cfg} | {seed} | {s['final_return']} | {s['sps']:,.0f} | {s['compile_seconds']:.2f} |")
PYEOF
    done
  done
} | tee "$OUT_DIR/table.md"
