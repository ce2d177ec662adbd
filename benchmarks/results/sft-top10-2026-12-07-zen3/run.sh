#!/usr/bin/env bash
# SFT with only the top 10 decoder layers trained (time and quality), seed 0, Zen 3, same 200 held-out games as section Q.
set -euo pipefail
cd /work/main && source .venv/bin/activate
D=runs/sft-top10
date -u +%FT%TZ > $D/start.txt
/usr/bin/time -v turncredit sft configs/20q-main.yaml sft.trainable_layers=10 run.progress=never --out $D/sft > $D/log-sft.txt 2>&1
date -u +%FT%TZ > $D/sft-done.txt
/usr/bin/time -v turncredit eval configs/20q-main.yaml --model $D/sft/checkpoint --out $D/eval-sft.json --episodes $D/eval-sft.jsonl run.progress=never > $D/log-eval-sft.txt 2>&1
date -u +%FT%TZ > $D/end.txt
