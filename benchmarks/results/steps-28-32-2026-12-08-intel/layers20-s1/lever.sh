#!/usr/bin/env bash
# lever.sh NAME OVERRIDES...: a 24-step RL run from W's seed-1 SFT with W's RL config plus OVERRIDES,
# then the same 200 held-out games, compared with W's seed-1 SFT and 24-step RL evaluations
set -euo pipefail
N=$1; shift
D=/work/exp/lever/$N; mkdir -p $D
cd /work/mjW1  # the RL config names its SFT start relative to this checkout
export PYTHONPATH=/work/main/src
TC=/work/main/.venv/bin/turncredit
echo "$@" > $D/overrides.txt
date -u +%FT%TZ > $D/start.txt
/usr/bin/time -v $TC train runs/20q-main/rl/config.yaml run.progress=never "$@" --run-dir $D/run > $D/log-rl.txt 2>&1
/usr/bin/time -v $TC eval configs/20q-main.yaml --model $D/run/checkpoint --out $D/eval.json --episodes $D/eval.jsonl run.progress=never > $D/log-eval.txt 2>&1
$TC compare /work/exp/cont/s1/sft.json $D/eval.json --out $D/cmp-sft.json > $D/cmp-sft.txt 2>&1
$TC compare /work/exp/cont/s1/rl24.json $D/eval.json > $D/cmp-rl24.txt 2>&1
date -u +%FT%TZ > $D/end.txt
