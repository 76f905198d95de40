#!/usr/bin/env bash
# llama.cpp's own llama-bench for the side-by-side benchmarks, from the sources vendored in the
# installed llama-cpp-python release. Two builds:
#   ours   (default) llama-bench driving the installed wheel's own libraries and CPU variants: the
#          binary is linked against a throwaway build, then run on the wheel's libraries.
#   native (`native`) llama.cpp as a one-machine build ships it: -march=native, llamafile on.
#   server (`server`) llama.cpp's own llama-server, built as `native` (benchmarks/serve_peer.py).
# Prints the folder to pass as LLAMA_BENCH_OURS / LLAMA_CPP_BIN. Benchmarks only; never CI.
set -euo pipefail
kind="${1:-ours}"
python="${PYTHON:-.venv/bin/python}"
version=$("$python" -c 'import llama_cpp; print(llama_cpp.__version__)')
lib=$("$python" -c 'import llama_cpp, pathlib; print(pathlib.Path(llama_cpp.__file__).parent / "lib")')
root="${LOCALCHAT_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/localchat-build}/llama-bench-$version-$kind"
target=llama-bench
[ "$kind" = server ] && target=llama-server
if [ ! -x "$root/build/bin/$target" ]; then
  mkdir -p "$root"
  if [ ! -d "$root/src" ] && [ -n "${LLAMA_CPP_PYTHON_SOURCE:-}" ]; then  # carried source (scripts/gpu-bench.sh)
    mkdir -p "$root/src" && cp -r "$LLAMA_CPP_PYTHON_SOURCE"/. "$root/src/"
  elif [ ! -d "$root/src" ]; then
    "$python" -m pip download --no-deps --no-binary :all: -d "$root" "llama-cpp-python==$version" >&2
    mkdir -p "$root/src" && tar xzf "$root"/llama_cpp_python-*.tar.gz -C "$root/src" --strip-components=1
  fi
  flags=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF)
  if [ "$kind" = server ]; then flags+=(-DLLAMA_BUILD_SERVER=ON); else flags+=(-DLLAMA_BUILD_SERVER=OFF); fi
  if [ "$kind" != ours ]; then
    flags+=(-DGGML_NATIVE=ON -DGGML_LLAMAFILE=ON)
    # Without AMX: ggml's AMX kernels die of SIGILL on virtualised CPUs that report AMX.
    if grep -q amx_tile /proc/cpuinfo 2>/dev/null; then
      flags+=("-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
              "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
    fi
  else
    flags+=(-DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF -DGGML_CPU=OFF)
  fi
  cmake -S "$root/src/vendor/llama.cpp" -B "$root/build" "${flags[@]}" >&2
  cmake --build "$root/build" --target "$target" -j "$(nproc)" >&2
fi
if [ "$kind" != ours ]; then
  echo "$root/build/bin"
else
  # llama-bench loads CPU variants from its own folder: give it the wheel's, beside it.
  run="$root/run"
  rm -rf "$run" && mkdir -p "$run"
  cp "$root/build/bin/llama-bench" "$run/"
  for f in "$lib"/*; do [ -f "$f" ] && ln -s "$f" "$run/"; done
  echo "$run"
fi
