#!/usr/bin/env bash
# Install llama-cpp-python with llama.cpp's CPU backend as runtime-selected ISA variants and the GPU
# backends this machine can build (scripts/gpu_backends.py, LOCALCHAT_GPU=auto|none|cuda,vulkan,metal)
# (GGML_BACKEND_DL, as llama.cpp's own releases ship): localchat loads the variants itself
# (runtime/backends/kernels.py), proving the chosen one in a child process, and uses AVX-512/VNNI/AMX
# kernels where the CPU has them. llamafile's sgemm is on for speed; scripts/llama-backends.cmake also
# builds the variants without it into llama_cpp/lib/exact for --deterministic.
# LOCALCHAT_CPU_VARIANTS=native (the default) builds the best fast variant this CPU runs and the best safe
# exact one, the fallback of both modes (scripts/native_variants.py), a few minutes' compile; =all builds
# every variant of the architecture, so the wheel runs on any CPU of it (the desktop bundle and CI).
# Never -march=native: a native build crashed in ggml's AMX kernels on a virtualised CPU, and a
# child-process proof needs a fallback to fall to.
# The built wheel is cached by version, flags (GPU backends included), variants and the hook's content;
# with no cache it is built.
# --build-only: build (or find) the cached wheel and install nothing (setup.sh installs localchat's other
# dependencies meanwhile, then runs this again to install it).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
python="${PYTHON:-python}"
hook="$here/llama-backends.cmake"
mode="${LOCALCHAT_CPU_VARIANTS:-native}"
case "$mode" in native|all) ;; *) echo "LOCALCHAT_CPU_VARIANTS must be native or all, not '$mode'" >&2; exit 2 ;; esac
# "fast exact": comma lists of variants, empty where the architecture has none (one portable backend).
variants=$("$python" "$here/native_variants.py" "$mode" || true)
fast="${variants%% *}" exact="${variants##* }"
# CMAKE_ARGS given by hand replaces the choice of flags, GPU backends included.
[ -n "${CMAKE_ARGS:-}" ] && LOCALCHAT_CMAKE_ARGS_GIVEN=1
if [ -z "${CMAKE_ARGS:-}" ]; then
  # localchat runs text models through libllama alone: the multimodal library (mtmd) is not built.
  CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF"
  if [ -z "$variants" ]; then
    CMAKE_ARGS="$CMAKE_ARGS -DGGML_LLAMAFILE=OFF"
  elif [ "$mode" = all ]; then
    CMAKE_ARGS="$CMAKE_ARGS -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_LLAMAFILE=ON"
  else  # the wheel's own tree builds no CPU backend; the hook builds the named variants
    CMAKE_ARGS="$CMAKE_ARGS -DGGML_BACKEND_DL=ON -DGGML_CPU=OFF -DGGML_LLAMAFILE=ON"
  fi
fi
[ -n "$variants" ] && CMAKE_ARGS="$CMAKE_ARGS -DLOCALCHAT_FAST_VARIANTS=$fast -DLOCALCHAT_EXACT_VARIANTS=$exact"
echo "llama.cpp CPU variants ($mode): ${fast:-built in}; exact: ${exact:-none}" >&2
if [ -z "${LOCALCHAT_CMAKE_ARGS_GIVEN:-}" ]; then
  gpu=$("$python" "$here/gpu_backends.py" "${LOCALCHAT_GPU:-auto}")
  CMAKE_ARGS="$CMAKE_ARGS ${gpu#"${gpu%% *}"}"
  echo "llama.cpp GPU backends: ${gpu%% *}" >&2
fi
sha() { if command -v sha256sum >/dev/null; then sha256sum "$@"; else shasum -a 256 "$@"; fi; }
key=$(printf '%s %s %s %s' "$version" "$CMAKE_ARGS" "$(cat "$hook" "$here/vulkan-layer-settings.h" | sha | cut -c1-16)" \
  "$("$python" -c 'import sys,platform;print(sys.version_info[:2],platform.machine())')" | sha | cut -c1-16)
# CMake reads CMAKE_ARGS split at spaces: the hook's path is quoted for a checkout path with spaces.
export CMAKE_ARGS="$CMAKE_ARGS \"-DCMAKE_PROJECT_llama_cpp_INCLUDE=$hook\""
cache="${LOCALCHAT_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/localchat-build}/llama-cpp-python-$key"
if ! ls "$cache"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
  echo "building llama-cpp-python $version ($CMAKE_ARGS); this takes several minutes" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # LLAMA_CPP_PYTHON_SOURCE: a folder of its source, built with the build tools already installed
  # (scripts/gpu-bench.sh on a machine with no network).
  if [ -n "${LLAMA_CPP_PYTHON_SOURCE:-}" ]; then
    "$python" -m pip wheel --no-deps --no-cache-dir --no-build-isolation -w "$tmp" "$LLAMA_CPP_PYTHON_SOURCE" >&2
  else
    "$python" -m pip wheel --no-deps --no-cache-dir -w "$tmp" "llama-cpp-python==$version" >&2
  fi
  mkdir -p "$cache"
  mv "$tmp"/llama_cpp_python-*.whl "$cache"/
  rm -rf "$tmp"
fi
[ "${1:-}" = "--build-only" ] && exit 0
"$python" -m pip install --force-reinstall --no-deps "$cache"/llama_cpp_python-"$version"-*.whl >&2
[ -n "${LLAMA_CPP_PYTHON_SOURCE:-}" ] || "$python" -m pip install "llama-cpp-python==$version" >&2  # its pure-Python dependencies
