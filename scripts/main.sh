#!/usr/bin/env bash
# The main job: SFT warm start → short StarPO run → evaluation (20 Questions, CPU, SmolLM2).
# Extra arguments are config overrides, e.g. `bash scripts/main.sh train.steps=2`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
exec turncredit pipeline configs/20q-starpo.yaml "$@"
