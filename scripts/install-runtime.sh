#!/usr/bin/env bash
# Install llama-cpp-python built for a CPU baseline rather than -march=native: a native build on a
# CPU with AMX crashes in ggml's AMX kernels, and a wheel cached on one host must run on the next.
# LLAMAFILE off: its sgemm serves only batches of two or more rows, so a sequence decoded beside
# others would round differently from the same sequence alone; without it greedy output is
# token-identical with and without concurrency (the engine also turns off weight repacking).
# The built wheel is cached by version and build flags; with no cache it is built (a few minutes).
set -euo pipefail
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
python="${PYTHON:-python}"
if [ -z "${CMAKE_ARGS:-}" ]; then
  case "$(uname -m)" in
    x86_64|amd64) CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_LLAMAFILE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON -DGGML_F16C=ON" ;;
    *) CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_LLAMAFILE=OFF" ;;
  esac
fi
export CMAKE_ARGS
key=$(printf '%s %s %s' "$version" "$CMAKE_ARGS" "$("$python" -c 'import sys,platform;print(sys.version_info[:2],platform.machine())')" | sha256sum | cut -c1-16)
cache="${LOCALCHAT_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/localchat-build}/llama-cpp-python-$key"
if ! ls "$cache"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
  echo "building llama-cpp-python $version ($CMAKE_ARGS); this takes a few minutes" >&2
  tmp=$(mktemp -d)
  "$python" -m pip wheel --no-deps --no-cache-dir -w "$tmp" "llama-cpp-python==$version" >&2
  mkdir -p "$cache"
  mv "$tmp"/llama_cpp_python-*.whl "$cache"/
  rm -rf "$tmp"
fi
"$python" -m pip install --force-reinstall --no-deps "$cache"/llama_cpp_python-"$version"-*.whl >&2
"$python" -m pip install "llama-cpp-python==$version" >&2  # its pure-Python dependencies
