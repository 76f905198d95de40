#!/usr/bin/env bash
# Install llama-cpp-python with llama.cpp's CPU backend as runtime-selected ISA variants
# (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS, as llama.cpp's own releases ship): one wheel runs on any
# CPU of its architecture and uses AVX-512/VNNI/AMX kernels where the CPU has them. localchat
# loads the variants itself (runtime/backends.py), proving the chosen one in a child process.
# llamafile's sgemm is on for speed; scripts/cpu-variants.cmake also builds the variants without it
# into llama_cpp/lib/exact for --deterministic. Never -march=native: a wheel cached on one host
# must run on the next, and a native build crashed in ggml's AMX kernels on a virtualised CPU.
# The built wheel is cached by version, flags and the hook's content; with no cache it is built.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
python="${PYTHON:-python}"
hook="$here/cpu-variants.cmake"
if [ -z "${CMAKE_ARGS:-}" ]; then
  case "$(uname -m)" in
    x86_64|amd64|aarch64|arm64)
      CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_LLAMAFILE=ON" ;;
    *) CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_LLAMAFILE=OFF" ;;  # one portable CPU backend
  esac
fi
sha() { if command -v sha256sum >/dev/null; then sha256sum "$@"; else shasum -a 256 "$@"; fi; }
key=$(printf '%s %s %s %s' "$version" "$CMAKE_ARGS" "$(sha "$hook" | cut -c1-16)" \
  "$("$python" -c 'import sys,platform;print(sys.version_info[:2],platform.machine())')" | sha | cut -c1-16)
# CMake reads CMAKE_ARGS split at spaces: the hook's path is quoted for a checkout path with spaces.
export CMAKE_ARGS="$CMAKE_ARGS \"-DCMAKE_PROJECT_llama_cpp_INCLUDE=$hook\""
cache="${LOCALCHAT_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/localchat-build}/llama-cpp-python-$key"
if ! ls "$cache"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
  echo "building llama-cpp-python $version ($CMAKE_ARGS); this takes several minutes" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$python" -m pip wheel --no-deps --no-cache-dir -w "$tmp" "llama-cpp-python==$version" >&2
  mkdir -p "$cache"
  mv "$tmp"/llama_cpp_python-*.whl "$cache"/
  rm -rf "$tmp"
fi
"$python" -m pip install --force-reinstall --no-deps "$cache"/llama_cpp_python-"$version"-*.whl >&2
"$python" -m pip install "llama-cpp-python==$version" >&2  # its pure-Python dependencies
