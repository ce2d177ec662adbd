#!/bin/bash
# RL from the split SFT on the words it never saw, with the env's repeat penalty off
# (the idle cost on the advantage still charges a repeat −1, as every idle turn).
set -euo pipefail
cd /work/main; source .venv/bin/activate
O=runs/split; R=$O/rl-norep
date -u +%FT%TZ > $O/norep-start.txt
/usr/bin/time -v -o $O/time-rl-norep.txt turncredit train configs/20q-main.yaml model.name=$O/sft/checkpoint \
  env.options.words_train=/tmp/words/train-rl.tsv env.options.repeated_reward=0.0 run.progress=never --run-dir $R > $O/log-rl-norep.txt 2>&1
date -u +%FT%TZ >> $O/norep-start.txt
/usr/bin/time -v -o $O/time-eval-rl-norep.txt turncredit eval configs/20q-main.yaml --model $R/checkpoint run.progress=never --out $O/eval-rl-norep.json --episodes $O/eval-rl-norep.jsonl > $O/log-eval-rl-norep.txt 2>&1
turncredit compare $O/eval-sft.json $O/eval-rl-norep.json --out $O/compare-norep.json > $O/log-compare-norep.txt 2>&1
python benchmarks/turn_kinds.py $O/eval-sft.jsonl $O/eval-rl-norep.jsonl > $O/turn-kinds-norep.txt 2>&1
date -u +%FT%TZ >> $O/norep-start.txt
