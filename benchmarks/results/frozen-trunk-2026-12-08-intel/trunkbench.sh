#!/usr/bin/env bash
# before/after replays of one update (V's seed-0 step 10), the chain paused meanwhile
set -u
OUT=/work/exp/trunkbench; mkdir -p $OUT
PIDS=$(pgrep -f "turncredit (train|eval)" | tr '\n' ' ')
[ -n "$PIDS" ] && kill -STOP $PIDS
for r in 1 2; do
  for v in before after; do
    SRC=/work/snapA/src; [ $v = after ] && SRC=/work/main/src
    /work/exp/replay.sh $SRC 10 train.micro_batch_tokens=3200 $EXTRA > $OUT/$TAG-$v-$r.txt 2>&1
  done
done
[ -n "$PIDS" ] && kill -CONT $PIDS
