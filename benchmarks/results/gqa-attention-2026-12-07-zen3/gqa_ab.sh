#!/bin/bash
# Interleaved A/B of the GQA attention candidate: 40 held-out games (10 test words x 4), one batch of 40 rows.
set -u
M=/work/main/runs/split/sft/checkpoint
O=/work/main/runs/gqa-ab; mkdir -p $O
for i in 1 2; do
  for side in before after; do
    if [ $side = before ]; then dir=/work/main; else dir=/tmp/gqa; fi
    cd $dir
    date -u +%FT%TZ > $O/$side-$i.start
    PYTHONPATH=$dir/src /usr/bin/time -v -o $O/$side-$i.time /work/main/.venv/bin/turncredit eval configs/20q-main.yaml --model $M \
      eval.num_tasks=10 run.progress=never --out $O/$side-$i.json --episodes $O/$side-$i.jsonl > $O/$side-$i.log 2>&1
  done
done
