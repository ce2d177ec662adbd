#!/usr/bin/env bash
# the main job's pipeline, reduced (10 SFT steps, 40-game evaluations, 1 RL step), native kernels:
# before (evaluations in the training process) and after (each in a fresh process)
source /work/main/.venv/bin/activate; cd /work/main
OUT=/tmp/pipemem; mkdir -p $OUT
for side in before after; do
  if [ $side = before ]; then SRC=/tmp/before/src; else SRC=/work/main/src; fi
  PYTHONPATH=$SRC /usr/bin/time -v turncredit pipeline configs/20q-main.yaml --skip-base-eval sft.num_demos=80 sft.epochs=1 \
     eval.num_tasks=10 train.steps=1 run.progress=never run.out_dir=$OUT/$side > $OUT/$side.log 2>&1
done
grep -H "\] [0-9]* s, peak\|peak RSS of the job\|Maximum res\|Elapsed\|Mean@4" $OUT/*.log
