#!/usr/bin/env bash
# The seed-0 main job's RL run of section T (/work/mj6, 8 steps) continued to 24 steps (from the 16-step run, rl16)
# (turncredit train --resume, train.steps=24), then the 200 held-out games.
set -euo pipefail
D=/work/exp/rl24
export PYTHONPATH=/work/snap2/src
TC=/work/mj6/.venv/bin/turncredit
cd /work/mj6  # the run config names its SFT start relative to the main job's checkout
date -u +%FT%TZ > $D/start.txt
/usr/bin/time -v $TC train $D/run/config.yaml train.steps=24 run.progress=never --resume $D/run > $D/log-rl.txt 2>&1
/usr/bin/time -v $TC eval /work/snap2/configs/20q-main.yaml --model $D/run/checkpoint --out $D/eval-rl.json --episodes $D/eval-rl.jsonl run.progress=never > $D/log-eval-rl.txt 2>&1
$TC compare /work/exp/mj6-sft.json $D/eval-rl.json --out $D/compare-vs-sft.json > $D/compare-vs-sft.txt 2>&1
$TC compare /work/exp/mj6-rl.json $D/eval-rl.json --out $D/compare-vs-main-rl.json > $D/compare-vs-main-rl.txt 2>&1
date -u +%FT%TZ > $D/end.txt
