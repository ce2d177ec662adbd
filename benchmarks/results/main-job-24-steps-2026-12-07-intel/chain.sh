#!/usr/bin/env bash
# after the AVX2 seed-0 job: native seed 1, then native seed 2, each from a clean clone of b7f6d5c
while [ "$(wc -l < /work/mjA/start-end.txt)" -lt 2 ]; do sleep 5; done
for seed in 1 2; do
  D=/work/mjS$seed
  rm -rf $D && git clone -q /work/main $D && cd $D && git checkout -q b7f6d5c
  date -u +%FT%TZ > start-end.txt
  /usr/bin/time -v bash scripts/main.sh run.progress=never run.seed=$seed > log.txt 2>&1
  date -u +%FT%TZ >> start-end.txt
done
