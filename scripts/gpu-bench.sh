#!/usr/bin/env bash
# The engine benchmark on a GPU machine that reaches no network (never CI; the project never needs a GPU).
# Needs what scripts/gpu-bench-pack.sh put in .gpu-bench/ (carried with the working tree), a compiler,
# CMake and ninja; on NVIDIA also nvcc and a driver; uses the machine's own torch and numpy if there.
#   1. llama-cpp-python built from the carried source with the GPU backend (CUDA for this GPU's
#      architecture only: the fastest build; GPU_BENCH_BACKEND=vulkan or cpu to rehearse elsewhere) and
#      this CPU's variants, into .venv-gpu, with every core;
#   2. the probe and the plan on this machine (the usable devices as llama.cpp names them);
#   3. the devices side by side (benchmarks/devices.py): where the layers went, prompt and decode speed;
#   4. a synthetic 8B-class Llama (random weights, Llama-3-8B's shape) at Q4_K_M: ours vs the bindings'
#      Llama vs llama-bench of the same build, every layer offloaded, % of the bandwidth roofline;
#   5. with two GPUs: the PD split and the layer split.
# (The GPTQ torch worker runs on the CPU only so far: no CUDA figure for it yet.)
# Results go to stdout and to $OUT (default gpu-bench-out/) as Markdown for docs/benchmarks.md. Each step
# that fails says so and the next one runs: a borrowed machine's minutes go to measuring.
set -uo pipefail
cd "$(dirname "$0")/.."
carry="${GPU_BENCH_CARRY:-.gpu-bench}"
out="${OUT:-$PWD/gpu-bench-out}"
backend="${GPU_BENCH_BACKEND:-cuda}"
mkdir -p "$out"
export LOCALCHAT_HOME="${LOCALCHAT_HOME:-$out/home}"
[ -d "$carry/wheels" ] || { echo "gpu-bench: no $carry/: run scripts/gpu-bench-pack.sh where the network is, and carry it" >&2; exit 2; }
step() { echo "== $*" | tee -a "$out/steps.txt"; }
if [ "$backend" = cuda ]; then
  command -v nvidia-smi >/dev/null || { echo "gpu-bench: no nvidia-smi (GPU_BENCH_BACKEND=vulkan or cpu elsewhere)" >&2; exit 2; }
  nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv | tee "$out/gpus.csv"
fi
py=.venv-gpu/bin/python
# The machine's own torch and numpy are used where it has them: nothing to download.
[ -x "$py" ] || python3 -m venv --system-site-packages .venv-gpu
wheels=(--no-index --find-links "$carry/wheels")
step "build ($backend)"
t0=$(date +%s)
src=$(mktemp -d)
tar xJf "$carry"/llama-cpp-python-*.tar.xz -C "$src"
"$py" -m pip install -q "${wheels[@]}" scikit-build-core pathspec packaging
case "$backend" in cuda) gpu=cuda ;; vulkan) gpu=vulkan ;; *) gpu=none ;; esac
# The cache key is the build's flags: a second run reuses the wheel.
LOCALCHAT_GPU=$gpu LOCALCHAT_CPU_VARIANTS=native CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" PYTHON="$py" \
  LLAMA_CPP_PYTHON_SOURCE="$(ls -d "$src"/llama_cpp_python-*/)" \
  bash scripts/install-runtime.sh || { echo "gpu-bench: the build failed" >&2; exit 1; }
"$py" -m pip install -q "${wheels[@]}" --no-deps -e . && \
  "$py" -m pip install -q "${wheels[@]}" huggingface-hub platformdirs psutil PyYAML Jinja2 nvidia-ml-py jsonschema \
    regex httpx gguf tqdm 2>&1 | tail -2
echo "build: $(( $(date +%s) - t0 )) s" | tee "$out/build.txt"
step "probe and plan"
"$py" -m localchat probe | tee "$out/probe.txt"
"$py" -m localchat plan --offline | tee "$out/plan.txt"
step "synthetic 8B Q4_K_M"
model=$("$py" - <<'PY'
from localchat.models.derive import random_weights_like, requantize
from localchat.models.resolve import resolve_model
shape = {"n_layer": 32, "n_embd": 4096, "n_head": 32, "n_head_kv": 8, "n_ff": 14336}  # Llama 3 8B
f16 = random_weights_like(resolve_model("smollm2-135m"), **shape, seed=8)
print(requantize(f16, "Q4_K_M"))
PY
) && echo "model: $model ($(du -h "$model" | cut -f1))"
step "devices side by side"
"$py" benchmarks/devices.py "$model" --output "$out/devices.md" || echo "gpu-bench: devices.py failed" >&2
step "ours against llama-bench of the same build"
bench_dir=$(LLAMA_CPP_PYTHON_SOURCE="$(ls -d "$src"/llama_cpp_python-*/)" PYTHON="$py" \
  bash benchmarks/build-llama-bench.sh ours) || bench_dir=""
LOCALCHAT_BENCH_GPU_LAYERS=999 LLAMA_BENCH_OURS="$bench_dir" "$py" benchmarks/gpu.py "$model" --output "$out/engine.md" \
  || echo "gpu-bench: gpu.py failed" >&2
if [ "$("$py" -c 'from localchat.hardware.probe import probe; from localchat.runtime.backends.gpus import usable; print(len(usable(probe(False)).gpus))')" -ge 2 ]; then
  step "two GPUs: PD split and layer split"
  "$py" benchmarks/disagg.py --model "$model" --probe --output "$out/placements.md" || echo "gpu-bench: disagg.py failed" >&2
fi
rm -rf "$src"
echo "gpu-bench: done; results in $out" >&2
