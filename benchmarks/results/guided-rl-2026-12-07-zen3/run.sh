#!/usr/bin/env bash
# Expert-guided RL (algo.expert_guidance=M) from the main job's seed-0 SFT of section Q (Zen 3), main recipe otherwise;
# then the same 200 held-out games. Usage: run.sh M
set -euo pipefail
cd /work/main && source .venv/bin/activate
M=$1; D=runs/guided/m$M; SFT=/tmp/mj/runs/20q-main/sft/checkpoint
mkdir -p $D
while [ ! -f runs/sft-top10/end.txt ]; do sleep 20; done
date -u +%FT%TZ > $D/start.txt
/usr/bin/time -v turncredit train configs/20q-main.yaml model.name=$SFT algo.expert_guidance=$M --run-dir $D/rl run.progress=never > $D/log-rl.txt 2>&1
/usr/bin/time -v turncredit eval configs/20q-main.yaml --model $D/rl/checkpoint --out $D/eval-rl.json --episodes $D/eval-rl.jsonl run.progress=never > $D/log-eval-rl.txt 2>&1
date -u +%FT%TZ > $D/end.txt
