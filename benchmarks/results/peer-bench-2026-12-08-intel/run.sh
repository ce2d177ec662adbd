#!/usr/bin/env bash
# peer-workload bench, back to back, alone: before (ef107f6) vs after (working tree), native and AVX2-only
set -u
D=/work/exp/bench8; cd /work/main
PY=/work/main/.venv/bin/python
b() {  # NAME SRC [env...] -- overrides
  local name=$1 src=$2; shift 2
  env "$@" PYTHONPATH=$src /usr/bin/time -v $PY -m turncredit.cli bench $CFG --groups 2 --out $D/$name.json $OVR > $D/$name.log 2>&1
}
CFG=configs/bench-peer-workload.yaml
OVR="" b before-native /work/snapA/src X=1
OVR="" b after-native /work/main/src X=1
OVR="train.micro_batch_tokens=3200" b after-mbt3200-native /work/main/src X=1
OVR="train.micro_batch_tokens=1600" b after-mbt1600-native /work/main/src X=1
OVR="train.micro_batch_tokens=3200 train.bf16=auto" b after-mbt3200-bf16-native /work/main/src X=1
date -u +%FT%TZ > $D/end.txt
