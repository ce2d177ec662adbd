#!/usr/bin/env bash
# RL from the main job's seed-0 SFT (clean clone /work/mj6 at d607aa5, Intel AMX, bf16 auto, 32-row evals)
# with the given config overrides (code of /work/main); then the 200 held-out games; compared
# with that job's SFT (35.0) and RL (34.0).
set -euo pipefail
NAME=$1; shift
D=/work/exp/$NAME
mkdir -p $D
SRC=${SRC:-/work/main}
export PYTHONPATH=$SRC/src
TC=/work/mj6/.venv/bin/turncredit
cd $SRC
echo "$@" > $D/overrides.txt
git -C $SRC rev-parse HEAD > $D/commit.txt
date -u +%FT%TZ > $D/start.txt
/usr/bin/time -v $TC train configs/20q-main.yaml model.name=/work/mj6/runs/20q-main/sft/checkpoint run.progress=never "$@" --run-dir $D/run > $D/log-rl.txt 2>&1
/usr/bin/time -v $TC eval configs/20q-main.yaml --model $D/run/checkpoint --out $D/eval-rl.json --episodes $D/eval-rl.jsonl run.progress=never > $D/log-eval-rl.txt 2>&1
$TC compare /work/exp/mj6-sft.json $D/eval-rl.json --out $D/compare-vs-sft.json > $D/compare-vs-sft.txt 2>&1
$TC compare /work/exp/mj6-rl.json $D/eval-rl.json --out $D/compare-vs-main-rl.json > $D/compare-vs-main-rl.txt 2>&1
date -u +%FT%TZ > $D/end.txt
