#!/usr/bin/env bash
# The test suite (fast tests; `bash scripts/test.sh -m slow` adds the real-model ones).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
exec python -m pytest -q "$@"
