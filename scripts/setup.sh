#!/usr/bin/env bash
# From nothing to a working install in .venv: the llama.cpp runtime, localchat, and with --dev
# the test tools. Safe to run again; it reuses what is already there.
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
PYTHON=.venv/bin/python bash scripts/install-runtime.sh
extras=""
[ "${1:-}" = "--dev" ] && extras="[dev]"
.venv/bin/python -m pip install --quiet -e ".$extras"
echo "localchat is installed in .venv: run .venv/bin/localchat" >&2
