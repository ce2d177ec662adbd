#!/usr/bin/env bash
# cont.sh CLONE NAME STEP... : continue CLONE's main-job RL run (a copy) to each STEP in turn with
# `turncredit train --resume`, evaluate the 200 held-out games after each, compare with the job's SFT
set -euo pipefail
C=$1; N=$2; shift 2
D=/work/exp/cont/$N; mkdir -p $D
TC=$C/.venv/bin/turncredit
cd $C
[ -d $D/run ] || cp -r runs/20q-main/rl $D/run
python3 -c "
import json;d=json.load(open('runs/20q-main/summary.json'))
json.dump({'after SFT':d['eval']['after SFT']},open('$D/sft.json','w'))
json.dump({'after SFT + RL':d['eval']['after SFT + RL']},open('$D/rl24.json','w'))"
for S in "$@"; do
  [ -f $D/eval-$S.json ] && continue
  /usr/bin/time -v $TC train $D/run/config.yaml train.steps=$S run.progress=never --resume $D/run > $D/log-rl-$S.txt 2>&1
  rm -rf $D/ckpt-$S; cp -r $D/run/checkpoint $D/ckpt-$S
  /usr/bin/time -v $TC eval configs/20q-main.yaml --model $D/run/checkpoint --out $D/eval-$S.json --episodes $D/eval-$S.jsonl run.progress=never > $D/log-eval-$S.txt 2>&1
  $TC compare $D/sft.json $D/eval-$S.json --out $D/cmp-sft-$S.json > $D/cmp-sft-$S.txt 2>&1
  $TC compare $D/rl24.json $D/eval-$S.json > $D/cmp-rl24-$S.txt 2>&1
done
date -u +%FT%TZ > $D/end.txt
