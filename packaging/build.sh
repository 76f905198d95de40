#!/usr/bin/env bash
# Build the desktop bundle in dist/localchat/ from the project's .venv (scripts/setup.sh makes it).
# Works in bash on Linux, macOS and Windows (Git Bash). Any failed step stops the build.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "build.sh: $*" >&2; exit 1; }

if [ -x .venv/bin/python ]; then
  py=.venv/bin/python
elif [ -x .venv/Scripts/python.exe ]; then
  py=.venv/Scripts/python.exe
else
  fail "no .venv here; run scripts/setup.sh first (it installs llama-cpp-python and localchat)."
fi
"$py" -c "import llama_cpp, gradio, localchat" \
  || fail ".venv lacks llama-cpp-python, gradio or localchat; run scripts/setup.sh."

# A bundle runs on CPUs other than this one: it must carry every CPU variant, fast and exact.
if all_variants=$("$py" scripts/native_variants.py all); then
  missing=$("$py" - $all_variants <<'PY'
import sys
from localchat.runtime.backends.cpu_variants import variant_modules, variant_name
for exact, wanted in ((False, sys.argv[1]), (True, sys.argv[2])):
    have = {variant_name(m) for m in variant_modules(exact)}
    print(" ".join(("exact " if exact else "") + v for v in wanted.split(",") if v not in have), end=" ")
PY
)
  [ -z "${missing// /}" ] || fail "this .venv's llama.cpp lacks CPU variants a bundle carries ($missing); \
build every one with: LOCALCHAT_CPU_VARIANTS=all bash scripts/setup.sh (keep your CMAKE_ARGS for a GPU build)."
fi

echo "build.sh: installing PyInstaller into .venv" >&2
"$py" -m pip install --quiet --disable-pip-version-check "pyinstaller>=6.10,<7" \
  || fail "could not install PyInstaller."

# The embedded default model: fetched once through localchat's own pull path, then cached.
default_model=$("$py" -c "from localchat.config import DEFAULT_MODEL; print(DEFAULT_MODEL)")
model_file=$("$py" -m localchat pull "$default_model" | tail -n 1) \
  || fail "could not fetch the default model $default_model."
[ -f "$model_file" ] || fail "pull printed '$model_file', which is not a file."
echo "build.sh: embedding $model_file" >&2

rm -rf dist/localchat dist/localchat.app
BUNDLE_MODEL_FILE="$model_file" "$py" -m PyInstaller --noconfirm --log-level WARN \
  --distpath dist --workpath build/pyinstaller packaging/localchat.spec \
  || fail "PyInstaller failed (see above)."

app=dist/localchat/localchat
[ -f "$app" ] || [ -f "$app.exe" ] || fail "PyInstaller finished but $app is missing."
echo "build.sh: built dist/localchat ($(du -sh dist/localchat | cut -f1)); check it with: $app selftest" >&2
