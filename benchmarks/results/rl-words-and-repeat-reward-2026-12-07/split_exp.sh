#!/bin/bash
# RL on words the SFT never saw: SFT on the first 750 training words, RL on the last 250.
set -euo pipefail
cd /work/main; source .venv/bin/activate
O=runs/split; mkdir -p $O
date -u +%FT%TZ > $O/start.txt
W="env.options.words_train=/tmp/words"
[ -f $O/sft/checkpoint/config.json ] || /usr/bin/time -v -o $O/time-sft.txt turncredit sft configs/20q-main.yaml $W/train-sft.tsv run.progress=never --out $O/sft > $O/log-sft.txt 2>&1
date -u +%FT%TZ >> $O/start.txt
[ -f $O/eval-sft.json ] || /usr/bin/time -v -o $O/time-eval-sft.txt turncredit eval configs/20q-main.yaml --model $O/sft/checkpoint run.progress=never --out $O/eval-sft.json --episodes $O/eval-sft.jsonl > $O/log-eval-sft.txt 2>&1
date -u +%FT%TZ >> $O/start.txt
/usr/bin/time -v -o $O/time-rl.txt turncredit train configs/20q-main.yaml model.name=$O/sft/checkpoint $W/train-rl.tsv run.progress=never --run-dir $O/rl > $O/log-rl.txt 2>&1
date -u +%FT%TZ >> $O/start.txt
turncredit eval configs/20q-main.yaml --model $O/rl/checkpoint run.progress=never --out $O/eval-rl.json --episodes $O/eval-rl.jsonl > $O/log-eval-rl.txt 2>&1
turncredit compare $O/eval-sft.json $O/eval-rl.json --out $O/compare.json > $O/log-compare.txt 2>&1
python benchmarks/turn_kinds.py $O/eval-sft.jsonl $O/eval-rl.jsonl > $O/turn-kinds.txt 2>&1
date -u +%FT%TZ >> $O/start.txt
