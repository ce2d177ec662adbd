#!/usr/bin/env bash
# after native seed 1: the peer bench at efc00a8 (native), then the AVX2-only seed-0 main job from a clean clone
while [ "$(wc -l < /work/mjW1/start-end.txt)" -lt 2 ]; do sleep 5; done
B=/work/exp/benchW; rm -rf $B; mkdir -p $B
cd /work/mjW2
rm -rf /work/exp/before-src && git -C /work/main worktree add -f /work/exp/before-src 1a7d994 >/dev/null 2>&1
PYTHONPATH=/work/exp/before-src/src /usr/bin/time -v .venv/bin/turncredit bench configs/bench-peer-workload.yaml --groups 2 --out $B/before-1a7d994.json > $B/before.log 2>&1
/usr/bin/time -v .venv/bin/turncredit bench configs/bench-peer-workload.yaml --groups 2 --out $B/after-efc00a8.json > $B/after.log 2>&1
D=/work/mjWA
rm -rf $D && git clone -q /work/main $D && cd $D && git checkout -q efc00a8
date -u +%FT%TZ > start-end.txt
ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 /usr/bin/time -v bash scripts/main.sh run.progress=never > log.txt 2>&1
date -u +%FT%TZ >> start-end.txt
