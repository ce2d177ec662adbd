#!/usr/bin/env bash
# RL from the main job's seed-0 SFT (clean clone /work/mj2 at 0c1bd49, Intel AMX, bf16 auto) with
# algo.expert_sft_coef=$1, the code of /work/main; then the 200 held-out games; compared with the job's SFT and RL.
set -euo pipefail
MU=$1; D=/work/exp/sftcoef-$MU
mkdir -p $D
export PYTHONPATH=/work/main/src
TC=/work/mj2/.venv/bin/turncredit
cd /work/main
date -u +%FT%TZ > $D/start.txt
/usr/bin/time -v $TC train configs/20q-main.yaml model.name=/work/mj2/runs/20q-main/sft/checkpoint algo.expert_sft_coef=$MU run.progress=never --run-dir $D/run > $D/log-rl.txt 2>&1
/usr/bin/time -v $TC eval configs/20q-main.yaml --model $D/run/checkpoint --out $D/eval-rl.json --episodes $D/eval-rl.jsonl run.progress=never > $D/log-eval-rl.txt 2>&1
$TC compare /work/exp/mj2-sft.json $D/eval-rl.json --out $D/compare-vs-sft.json > $D/compare-vs-sft.txt 2>&1
$TC compare /work/exp/mj2-rl.json $D/eval-rl.json --out $D/compare-vs-main-rl.json > $D/compare-vs-main-rl.txt 2>&1
date -u +%FT%TZ > $D/end.txt
