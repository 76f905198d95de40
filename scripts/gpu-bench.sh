#!/usr/bin/env bash
# The engine benchmark on an NVIDIA machine, in one go (never CI; the project never needs a GPU):
#   1. llama-cpp-python built with CUDA for this GPU's architecture only (the fastest build), into
#      .venv-gpu, with the same CPU variants as the CPU wheel;
#   2. a synthetic 8B-class Llama (random weights, Llama-3-8B's shape) quantized to Q4_K_M;
#   3. ours vs the bindings' Llama vs llama-bench with every layer offloaded, and % of the GPU's
#      bandwidth roofline; with two GPUs also the PD split and the layer split.
# Results go to stdout and to $OUT (default gpu-bench-out/) as Markdown for docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-bench-out}"
mkdir -p "$out"
export LOCALCHAT_HOME="${LOCALCHAT_HOME:-$out/home}"
command -v nvidia-smi >/dev/null || { echo "gpu-bench: no nvidia-smi: this script needs an NVIDIA GPU and its driver" >&2; exit 2; }
nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv | tee "$out/gpus.csv"
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
py=.venv-gpu/bin/python
[ -x "$py" ] || python3 -m venv .venv-gpu
"$py" -m pip install -q --upgrade pip
t0=$(date +%s)
CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$arch -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_LLAMAFILE=ON -DLLAVA_BUILD=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" PYTHON="$py" bash scripts/install-runtime.sh
"$py" -m pip install -q -e ".[dev]"
echo "build: $(( $(date +%s) - t0 )) s" | tee "$out/build.txt"
"$py" -m localchat probe | tee "$out/probe.txt"
model=$("$py" - <<'PY'
from localchat.models.catalog import resolve_model
from localchat.models.derive import random_weights_like, requantize
shape = {"n_layer": 32, "n_embd": 4096, "n_head": 32, "n_head_kv": 8, "n_ff": 14336}  # Llama 3 8B
f16 = random_weights_like(resolve_model("smollm2-135m"), **shape, seed=8)
print(requantize(f16, "Q4_K_M"))
PY
)
echo "model: $model ($(du -h "$model" | cut -f1))"
bench_dir=$(PYTHON="$py" bash benchmarks/build-llama-bench.sh ours)
LOCALCHAT_BENCH_GPU_LAYERS=999 LLAMA_BENCH_OURS="$bench_dir" "$py" benchmarks/gpu.py "$model" --output "$out/engine.md"
if [ "$gpus" -ge 2 ]; then
  "$py" benchmarks/disagg.py --model "$model" --probe --output "$out/placements.md"
fi
echo "gpu-bench: done; results in $out" >&2
