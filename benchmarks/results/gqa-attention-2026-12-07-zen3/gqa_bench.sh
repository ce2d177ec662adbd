#!/bin/bash
# The peer workload's bench (rollout + update), before and after the GQA attention candidate.
set -u
O=/work/main/runs/gqa-bench; mkdir -p $O
for side in before after; do
  if [ $side = before ]; then dir=/work/main; else dir=/tmp/gqa; fi
  cd $dir
  PYTHONPATH=$dir/src /usr/bin/time -v -o $O/$side.time /work/main/.venv/bin/turncredit bench configs/bench-peer-workload.yaml \
    --groups 2 run.progress=never --out $O/$side.json > $O/$side.log 2>&1
done
