#!/usr/bin/env bash
# Evaluation time and peak memory with and without dropping the KV cache's holes at each turn's
# start (KVCacheBackend.hole_ratio 0 = never, 1.25 = the default), on MODEL's 20 Questions
# evaluation: the main job's held-out games, 16 words × 4 = one batch of 64.
# Usage: bash benchmarks/decode_holes.sh MODEL OUTDIR   (alone on the machine)
set -euo pipefail
MODEL=${1:?SFT checkpoint}; OUT=${2:?output directory}
mkdir -p "$OUT"
for ratio in 0 1.25; do
  WITH="import sys; from turncredit.policy.backends import KVCacheBackend as K; K.hole_ratio = $ratio
from turncredit.cli import main; sys.exit(main(sys.argv[1:]))"
  /usr/bin/time -v python -c "$WITH" eval configs/20q-main.yaml --model "$MODEL" eval.num_tasks=16 \
      run.progress=never --out "$OUT/eval-holes$ratio.json" > "$OUT/eval-holes$ratio.log" 2> "$OUT/eval-holes$ratio.time"
done
grep -h "Elapsed\|Maximum resident" "$OUT"/*.time
