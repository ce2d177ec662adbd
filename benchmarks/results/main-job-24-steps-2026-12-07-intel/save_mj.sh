#!/usr/bin/env bash
# save_mj.sh CLONE NAME: a main job's small files into benchmarks/results/main-job-24-steps-2026-12-07-intel/NAME
set -euo pipefail
C=$1; R=/work/main/benchmarks/results/main-job-24-steps-2026-12-07-intel/$2
mkdir -p $R
grep -v "WARNING: Location\|Writing model shards\|Loading weights" $C/log.txt > $R/log.txt || true
cp $C/start-end.txt $C/runs/20q-main/summary.json $R/
cp $C/runs/20q-main/rl/metrics.jsonl $R/rl-metrics.jsonl
cp $C/runs/20q-main/sft/sft_metrics.jsonl $R/
(cd $C && git log --oneline -1) > $R/commit.txt
cd /work/main/benchmarks && PYTHONPATH=../src ../.venv/bin/python turn_kinds.py $C/runs/20q-main/eval/after_SFT.jsonl $C/runs/20q-main/eval/after_SFT_and_RL.jsonl > $R/turn-kinds.txt 2>&1 || true
