#!/usr/bin/env bash
# replay.sh SRC STEP [overrides]: one update on a saved step of the seed-0 24-step run
SRC=$1; STEP=$2; shift 2
cd /work/mj6 && PYTHONPATH=$SRC /work/mj6/.venv/bin/python /work/main/benchmarks/memory_profile.py /work/exp/rl24/run/config.yaml /work/mj6/runs/20q-main/sft/checkpoint --replay /work/exp/rl24/run/episodes/step_000$STEP.jsonl run.progress=never "$@"
