#!/usr/bin/env bash
# peak RSS of a 40-game evaluation (one batch of 40 rows), three variants side by side at one thread each
source /work/main/.venv/bin/activate; cd /work/main
OUT=/tmp/memprobe; mkdir -p $OUT
run() { name=$1; shift; env "$@" /usr/bin/time -v turncredit eval configs/20q-main.yaml --model /tmp/prof/sft eval.num_tasks=10 run.threads=1 run.progress=never --out $OUT/$name.json > $OUT/$name.log 2> $OUT/$name.time; }
run native X=1 &
run mmap1m MALLOC_MMAP_THRESHOLD_=1048576 &
run avx2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 &
wait
grep -H "Maximum resident\|Elapsed" $OUT/*.time
