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
#   6. the GPTQ torch worker on CUDA against the GGUF file of the same model on llama.cpp's CUDA backend
#      (benchmarks/gptq.py --device cuda), which measures the planner's torch_gptq share (assumed 0.5);
#      where the machine's torch sees the GPU (its CUDA build), with the gptq extra from the carried wheels.
# Results go to stdout and to $OUT (default gpu-bench-out/) as Markdown for docs/benchmarks.md. Each step
# that fails says so and the next one runs: a borrowed machine's minutes go to measuring.
#
# --compile-check [DIR]: the CUDA build's rehearsal on a machine with nvcc and no GPU (minutes, not the
# hours of the whole backend on two cores): the carried source configured with the CUDA flags this script
# builds with (CUDA_ARCHITECTURES, default 90: H100/H200), cuBLAS and the driver library found as below,
# and a handful of ggml-cuda objects compiled at the lowest priority (GPU_BENCH_JOBS, default 1), in DIR
# (default a new folder under /tmp). Links nothing, installs nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
carry="${GPU_BENCH_CARRY:-.gpu-bench}"
out="${OUT:-$PWD/gpu-bench-out}"
backend="${GPU_BENCH_BACKEND:-cuda}"
[ -d "$carry/wheels" ] || { echo "gpu-bench: no $carry/: run scripts/gpu-bench-pack.sh where the network is, and carry it" >&2; exit 2; }

# cuBLAS and libcuda for CMake's FindCUDAToolkit, where the toolkit lacks them: a toolkit of nvcc alone
# (CUDA 13 split cuBLAS into its own package) fails the configure with "links to CUDA::cublas but the
# target was not found". cuBLAS is taken from the Python's NVIDIA wheels (torch's CUDA builds install
# them), else from a carried wheel (nvidia_cublas*.whl in $carry/wheels); the driver's libcuda.so.1 gets
# the unversioned name CMake looks for. Exports what the compiler, the linker and the loader read.
# $1: a folder for the links; $2: "check" where no driver is needed (an empty stub stands in for libcuda:
# only the configure sees it).
cuda_libraries() {
  local dir="$1/cuda-libs" home="${CUDA_HOME:-/usr/local/cuda}" found="" lib
  mkdir -p "$dir/lib"
  if ! ls "$home"/include/cublas_v2.h "$home"/targets/*/include/cublas_v2.h >/dev/null 2>&1; then
    found=$("${PYTHON_FOR_CUDA:-python3}" - <<'PY' 2>/dev/null
import glob, os, sys
for base in sys.path:
    for sub in ("nvidia/cu13", "nvidia/cublas", "nvidia/cu12"):
        if os.path.isfile(os.path.join(base, sub, "include", "cublas_v2.h")):
            print(os.path.join(base, sub)); sys.exit()
PY
)
    if [ -z "$found" ] && ls "$carry"/wheels/nvidia_cublas*.whl >/dev/null 2>&1; then
      local wheel
      wheel=$(ls "$carry"/wheels/nvidia_cublas*.whl | tail -1)
      "${PYTHON_FOR_CUDA:-python3}" -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if "/include/" in n or "/lib/libcublas" in n])' "$wheel" "$1/cublas"
      found=$(dirname "$(dirname "$(ls "$1"/cublas/nvidia/*/include/cublas_v2.h | head -1)")")
    fi
    [ -n "$found" ] || { echo "gpu-bench: the CUDA toolkit in $home has no cuBLAS, and no Python NVIDIA wheel or" \
      "carried nvidia_cublas wheel has it: install the toolkit's cuBLAS (libcublas-dev) or put the wheel in $carry/wheels" >&2; return 1; }
    for lib in "$found"/lib/libcublas*.so.*; do ln -sf "$lib" "$dir/lib/$(basename "${lib%%.so.*}").so"; done
    echo "gpu-bench: cuBLAS from $found" >&2
    export CPATH="$found/include${CPATH:+:$CPATH}" LD_LIBRARY_PATH="$found/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  if ! ls "$home"/lib64/libcuda.so "$home"/lib64/stubs/libcuda.so "$home"/targets/*/lib/stubs/libcuda.so >/dev/null 2>&1 \
      && ! ldconfig -p | grep -q 'libcuda\.so '; then
    lib=$(ldconfig -p | sed -n 's/.*libcuda\.so\.1 .*=> //p' | head -1)
    if [ -n "$lib" ]; then
      ln -sf "$lib" "$dir/lib/libcuda.so"
    elif [ "${2:-}" = check ]; then
      echo "" > "$dir/stub.c" && cc -shared -o "$dir/lib/libcuda.so" "$dir/stub.c"
    else
      echo "gpu-bench: no libcuda (the NVIDIA driver's library): is the driver installed?" >&2; return 1
    fi
  fi
  export CMAKE_LIBRARY_PATH="$dir/lib${CMAKE_LIBRARY_PATH:+:$CMAKE_LIBRARY_PATH}" \
    LIBRARY_PATH="$dir/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
}

if [ "${1:-}" = --compile-check ]; then
  work="${2:-$(mktemp -d /tmp/gpu-bench-check.XXXXXX)}"
  mkdir -p "$work"
  t0=$(date +%s)
  tar xJf "$carry"/llama-cpp-python-*.tar.xz -C "$work" || exit 1
  src=$(ls -d "$work"/llama_cpp_python-*/)
  cuda_libraries "$work" check || exit 1
  # The CUDA flags the build takes (scripts/gpu_backends.py), for the architectures asked for.
  gpu=$(CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES:-90}" python3 scripts/gpu_backends.py cuda) || exit 1
  echo "gpu-bench: configuring with ${gpu#cuda }" >&2
  # As install-runtime.sh configures a GPU build (GGML_BACKEND_DL, CPU variants aside: not CUDA's part).
  nice -n 19 cmake -S "$src" -B "$work/build" -G Ninja -DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON \
    -DGGML_CPU=OFF ${gpu#cuda } > "$work/configure.log" 2>&1 \
    || { tail -30 "$work/configure.log" >&2; echo "gpu-bench: the CUDA configure failed ($work/configure.log)" >&2; exit 1; }
  objects=vendor/llama.cpp/ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir
  # The backend's core (it includes cuBLAS's headers), decode's mat-vec, Q4_K's int8 tensor-core matmul, flash attention.
  targets=("$objects/ggml-cuda.cu.o" "$objects/mmvq.cu.o" "$objects/template-instances/mmq-instance-q4_k.cu.o"
           "$objects/fattn.cu.o")
  nice -n 19 ninja -C "$work/build" -j"${GPU_BENCH_JOBS:-1}" "${targets[@]}" \
    || { echo "gpu-bench: the CUDA compile failed (in $work/build)" >&2; exit 1; }
  echo "gpu-bench: compile check passed: configured and compiled ${#targets[@]} ggml-cuda objects for" \
    "sm_${CUDA_ARCHITECTURES:-90} in $(( $(date +%s) - t0 )) s ($work)" >&2
  exit 0
fi

mkdir -p "$out"
export LOCALCHAT_HOME="${LOCALCHAT_HOME:-$out/home}"
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
if [ "$backend" = cuda ]; then PYTHON_FOR_CUDA="$py" cuda_libraries "$src" || exit 1; fi
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
step "GPTQ on torch (CUDA) against the GGUF file (CUDA)"
if "$py" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  "$py" -m pip install -q "${wheels[@]}" safetensors tokenizers 2>&1 | tail -2
  "$py" benchmarks/gptq.py --device cuda --threads "$(nproc)" | tee "$out/gptq.md" || echo "gpu-bench: gptq.py failed" >&2
else
  echo "gpu-bench: this machine's torch sees no CUDA GPU (or there is no torch): no GPTQ figure" | tee "$out/gptq.md" >&2
fi
rm -rf "$src"
echo "gpu-bench: done; results in $out" >&2
