#!/usr/bin/env bash
# memprobe.sh NAME [env...] -- [overrides]: 3 RL steps of seed 1's main RL config from its SFT checkpoint, peak RSS by time -v
N=$1; shift
ENVS=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do ENVS+=("$1"); shift; done; shift || true
O=/work/exp/memprobe/$N; rm -rf $O; mkdir -p $O
cd /work/mjS1; [ -n "${SRC:-}" ] && export PYTHONPATH=$SRC
env "${ENVS[@]}" /usr/bin/time -v /work/mjS1/.venv/bin/turncredit train runs/20q-main/rl/config.yaml train.steps=3 run.progress=never "$@" --run-dir $O/run > $O/log.txt 2>&1
grep "Elapsed\|Maximum resident" $O/log.txt
grep "rl\] step\|step " $O/log.txt | grep -v Warn | tail -3
