#!/usr/bin/env bash
# run.sh rl|dagger NAME [OVERRIDES...]: from the seed-0 main job's SFT of section T (a clean clone at
# d607aa5 in /work/mj6: Intel AMX, bf16 auto, top-10-layer SFT, 32-row evaluations), either the RL
# stage with OVERRIDES (rl) or one DAgger round (dagger: sft.epochs=0 sft.dagger_rounds=1); then the
# same 200 held-out games, compared with that job's SFT (35.0) and RL (34.0) evaluations
# (mj6-sft.json / mj6-rl.json: its summary.json's "after SFT" / "after SFT + RL").
# SRC: the checkout whose code runs (a git worktree of main at the commit in commit.txt).
set -euo pipefail
KIND=$1; NAME=$2; shift 2
D=/work/exp/$NAME
mkdir -p $D
SRC=${SRC:-/work/main}
export PYTHONPATH=$SRC/src
TC=/work/mj6/.venv/bin/turncredit
SFT=/work/mj6/runs/20q-main/sft/checkpoint
cd $SRC
echo "$@" > $D/overrides.txt
git -C $SRC rev-parse HEAD > $D/commit.txt
date -u +%FT%TZ > $D/start.txt
if [ "$KIND" = rl ]; then
  /usr/bin/time -v $TC train configs/20q-main.yaml model.name=$SFT run.progress=never "$@" --run-dir $D/run > $D/log-rl.txt 2>&1
  MODEL=$D/run/checkpoint; OUT=eval-rl
else
  /usr/bin/time -v $TC sft configs/20q-main.yaml model.name=$SFT sft.epochs=0 sft.dagger_rounds=1 run.progress=never "$@" --out $D/sft > $D/log-sft.txt 2>&1
  MODEL=$D/sft/checkpoint; OUT=eval
fi
/usr/bin/time -v $TC eval configs/20q-main.yaml --model $MODEL --out $D/$OUT.json --episodes $D/$OUT.jsonl run.progress=never > $D/log-$OUT.txt 2>&1
$TC compare /work/exp/mj6-sft.json $D/$OUT.json --out $D/compare-vs-sft.json > $D/compare-vs-sft.txt 2>&1
$TC compare /work/exp/mj6-rl.json $D/$OUT.json --out $D/compare-vs-main-rl.json > $D/compare-vs-main-rl.txt 2>&1
date -u +%FT%TZ > $D/end.txt
