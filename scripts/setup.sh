#!/usr/bin/env bash
# From nothing to a working install in .venv: the llama.cpp runtime, localchat, and with --dev
# the test tools, the gptq extra (so CI tests the torch worker) and the derive extra (so CI makes the
# embedding model with llama.cpp's converter); --gptq or --derive: that extra alone.
# Safe to run again; it reuses what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
"$python" - <<'PY'
import sys
if sys.version_info < (3, 10):
    sys.exit(f"localchat needs Python 3.10 or newer; this is {sys.version.split()[0]}.")
PY
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
extras=""
[ "${1:-}" = "--dev" ] && extras="[dev,gptq,derive]"
[ "${1:-}" = "--gptq" ] && extras="[gptq]"
[ "${1:-}" = "--derive" ] && extras="[derive]"
# localchat's other dependencies install while llama.cpp compiles: the compile waits on the CPU, pip
# mostly on downloads and unpacking. Then the built wheel goes in, and localchat on top of both.
requirements=$(mktemp)
dependencies=""
# A failed compile or Ctrl-C also ends the background pip: never two pips in one .venv on the next run.
trap 'if [ -n "$dependencies" ]; then kill "$dependencies" 2>/dev/null || true; fi; rm -f "$requirements"' EXIT
.venv/bin/python scripts/requirements.py "$extras" > "$requirements"
.venv/bin/python -m pip install --quiet -r "$requirements" &
dependencies=$!
PYTHON=.venv/bin/python bash scripts/install-runtime.sh --build-only
wait "$dependencies"
dependencies=""
PYTHON=.venv/bin/python bash scripts/install-runtime.sh
.venv/bin/python -m pip install --quiet -e ".$extras"
echo "localchat is installed in .venv: run .venv/bin/localchat" >&2
