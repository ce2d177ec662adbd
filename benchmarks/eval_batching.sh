#!/usr/bin/env bash
# Continuous batching vs even batches on the main job's held-out evaluation (issue 18, item 3).
#   bash benchmarks/eval_batching.sh CHECKPOINT BEFORE_SRC AFTER_SRC OUT [KEY=VALUE ...]
# BEFORE_SRC / AFTER_SRC: the src/ folders of two checkouts (e.g. a `git worktree` of the commit
# before). Each plays the same 100 held-out games (25 test words × 4) at eval.batch_size 20, so
# the old code runs 5 batches of 20 and the new one keeps 20 rows busy; alone, back to back.
set -euo pipefail
ckpt=$1 before=$2 after=$3 out=$4
shift 4
mkdir -p "$out"
for side in before after; do
  src=$before; [ "$side" = after ] && src=$after
  /usr/bin/time -v env PYTHONPATH="$src" turncredit eval configs/20q-main.yaml --model "$ckpt" \
    eval.num_tasks=25 eval.k=4 eval.batch_size=20 run.progress=never "$@" \
    --out "$out/eval-$side.json" --episodes "$out/episodes-$side.jsonl" > "$out/log-$side.txt" 2>&1
  grep -E "Elapsed|Maximum resident" "$out/log-$side.txt"
done
