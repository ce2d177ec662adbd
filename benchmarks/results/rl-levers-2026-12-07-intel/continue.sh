#!/usr/bin/env bash
# continue.sh NAME FROM_RUN CHECKOUT STEPS SFT.json RL.json [EVAL_BATCH]: a main job's RL run (a copy of
# FROM_RUN, e.g. /work/mj6/runs/20q-main/rl) continued to STEPS steps with `turncredit train --resume`
# (train.steps may grow; the recipe is the run's own config.yaml), then the same 200 held-out games
# (eval.batch_size EVAL_BATCH, default the config's 32), compared with that job's SFT and RL evaluations.
# Runs in CHECKOUT, the main job's clean clone, since the run's config names its SFT start relative to it.
#   rl16: continue.sh rl16 /work/mj6/runs/20q-main/rl /work/mj6 16 mj6-sft.json mj6-rl.json
#   rl24: continue.sh rl24 /work/exp/rl16/run         /work/mj6 24 mj6-sft.json mj6-rl.json
#   s1rl24: continue.sh s1rl24 /work/mj4/runs/20q-main/rl /work/mj4 24 mj4-sft.json mj4-rl.json 40
set -euo pipefail
NAME=$1; FROM=$2; CHECKOUT=$3; STEPS=$4; SFT_JSON=$5; RL_JSON=$6; BATCH=${7:-32}
D=/work/exp/$NAME
mkdir -p $D && cp -r $FROM $D/run
export PYTHONPATH=${SRC:-/work/main}/src
TC=/work/mj6/.venv/bin/turncredit
cd $CHECKOUT
date -u +%FT%TZ > $D/start.txt
/usr/bin/time -v $TC train $D/run/config.yaml train.steps=$STEPS run.progress=never --resume $D/run > $D/log-rl.txt 2>&1
/usr/bin/time -v $TC eval ${SRC:-/work/main}/configs/20q-main.yaml eval.batch_size=$BATCH --model $D/run/checkpoint \
    --out $D/eval-rl.json --episodes $D/eval-rl.jsonl run.progress=never > $D/log-eval-rl.txt 2>&1
$TC compare /work/exp/$SFT_JSON $D/eval-rl.json --out $D/compare-vs-sft.json > $D/compare-vs-sft.txt 2>&1
$TC compare /work/exp/$RL_JSON $D/eval-rl.json --out $D/compare-vs-main-rl.json > $D/compare-vs-main-rl.txt 2>&1
date -u +%FT%TZ > $D/end.txt
