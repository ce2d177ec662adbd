#!/usr/bin/env bash
# Rollout throughput with and without split-off decoding (KVCacheBackend.compact_ratio 0 = off,
# 2 = the default), on the peer workload and on a 20 Questions evaluation (MODEL, 20 words × 4).
# Usage: bash benchmarks/decode_split.sh MODEL OUTDIR   (alone on the machine)
set -euo pipefail
MODEL=${1:?SFT checkpoint}; OUT=${2:?output directory}
mkdir -p "$OUT"
for ratio in 0 2; do
  WITH="import sys; from turncredit.policy.backends import KVCacheBackend as K; K.compact_ratio = $ratio
from turncredit.cli import main; sys.exit(main(sys.argv[1:]))"
  /usr/bin/time -v python -c "$WITH" bench configs/bench-peer-workload.yaml --groups 2 --no-train \
      --out "$OUT/bench-ratio$ratio.jsonl" > "$OUT/bench-ratio$ratio.log" 2> "$OUT/bench-ratio$ratio.time"
  /usr/bin/time -v python -c "$WITH" eval configs/20q-starpo.yaml --model "$MODEL" eval.num_tasks=20 eval.k=4 \
      run.progress=never --out "$OUT/eval-ratio$ratio.json" > "$OUT/eval-ratio$ratio.log" 2> "$OUT/eval-ratio$ratio.time"
done
grep -h "Elapsed\|Maximum resident" "$OUT"/*.time
