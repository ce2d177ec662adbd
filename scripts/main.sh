#!/usr/bin/env bash
# The main job: SFT warm start → short RL run (StarPO objective, turn-level credit, exact ΔBelief)
# → evaluation on 200 paired held-out games (20 Questions, CPU, SmolLM2): configs/20q-main.yaml.
# Extra arguments are config overrides, e.g. `bash scripts/main.sh train.steps=2`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
# the untrained model loses every game (0 of 60 games in the brief's measurement) and plays all 20 turns, the slowest
# evaluation there is: benchmarks/ records it; `turncredit pipeline` without the flag runs it too
exec turncredit pipeline configs/20q-main.yaml --skip-base-eval "$@"
