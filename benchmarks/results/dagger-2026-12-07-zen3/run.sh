#!/usr/bin/env bash
# DAgger experiment: one round from the main job's seed-0 SFT (Zen 3, 2026-12-07), then eval, RL, eval.
set -euo pipefail
cd /work/main && source .venv/bin/activate
D=runs/dagger; SFT=/tmp/mj/runs/20q-main/sft/checkpoint
date -u +%FT%TZ > $D/start.txt
/usr/bin/time -v turncredit sft configs/20q-main.yaml model.name=$SFT sft.epochs=0 sft.dagger_rounds=1 run.progress=never --out $D/sft > $D/log-sft.txt 2>&1
/usr/bin/time -v turncredit eval configs/20q-main.yaml --model $D/sft/checkpoint --out $D/eval-sft.json --episodes $D/eval-sft.jsonl run.progress=never > $D/log-eval-sft.txt 2>&1
date -u +%FT%TZ > $D/sft-done.txt
/usr/bin/time -v turncredit train configs/20q-main.yaml model.name=$D/sft/checkpoint --run-dir $D/rl run.progress=never > $D/log-rl.txt 2>&1
/usr/bin/time -v turncredit eval configs/20q-main.yaml --model $D/rl/checkpoint --out $D/eval-rl.json --episodes $D/eval-rl.jsonl run.progress=never > $D/log-eval-rl.txt 2>&1
date -u +%FT%TZ > $D/end.txt
