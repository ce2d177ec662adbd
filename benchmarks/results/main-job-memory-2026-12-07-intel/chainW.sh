#!/usr/bin/env bash
# native seeds 2 then 1, each from a clean clone of efc00a8, alone
for seed in 2 1; do
  D=/work/mjW$seed
  rm -rf $D && git clone -q /work/main $D && cd $D && git checkout -q efc00a8
  date -u +%FT%TZ > start-end.txt
  /usr/bin/time -v bash scripts/main.sh run.progress=never run.seed=$seed > log.txt 2>&1
  date -u +%FT%TZ >> start-end.txt
done
