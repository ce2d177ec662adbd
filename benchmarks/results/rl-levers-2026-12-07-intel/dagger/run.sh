#!/usr/bin/env bash
# One DAgger round (sft.dagger_rounds=1, sft.epochs=0) from the main job's seed-0 SFT (/work/mj6, Intel AMX,
# bf16 auto, top-10-layer SFT), then the 200 held-out games, compared with that job's SFT (35.0) and RL (34.0).
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
/usr/bin/time -v $TC sft configs/20q-main.yaml model.name=/work/mj6/runs/20q-main/sft/checkpoint sft.epochs=0 sft.dagger_rounds=1 run.progress=never "$@" --out $D/sft > $D/log-sft.txt 2>&1
/usr/bin/time -v $TC eval configs/20q-main.yaml --model $D/sft/checkpoint --out $D/eval.json --episodes $D/eval.jsonl run.progress=never > $D/log-eval.txt 2>&1
$TC compare /work/exp/mj6-sft.json $D/eval.json --out $D/compare-vs-sft.json > $D/compare-vs-sft.txt 2>&1
$TC compare /work/exp/mj6-rl.json $D/eval.json --out $D/compare-vs-main-rl.json > $D/compare-vs-main-rl.txt 2>&1
date -u +%FT%TZ > $D/end.txt
