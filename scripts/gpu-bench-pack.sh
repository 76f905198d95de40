#!/usr/bin/env bash
# What scripts/gpu-bench.sh needs on a GPU machine that reaches no network, in one folder (default
# .gpu-bench/, under 64 MiB with the working tree): llama-cpp-python's source without what the build
# never reads (model vocabularies, docs, tests, the server's web page), the wheels its build needs, and
# the wheels localchat's runtime needs that a GPU machine with torch lacks, for Python 3.10 to 3.13.
# Run it here (it downloads); carry the folder; run `bash scripts/gpu-bench.sh` there.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-.gpu-bench}"
python="${PYTHON:-.venv/bin/python}"
version=$("$python" -c 'import llama_cpp; print(llama_cpp.__version__)' 2>/dev/null || echo 0.3.36)
rm -rf "$out" && mkdir -p "$out/wheels"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m pip download -q --no-deps --no-binary :all: -d "$tmp" "llama-cpp-python==$version"
tar xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
src=$(ls -d "$tmp"/llama_cpp_python-*/)
tar cJf "$out/llama-cpp-python-$version.tar.xz" -C "$src/.." --exclude='.git' --exclude='vendor/llama.cpp/tools/ui' --exclude='*.mp4' --exclude='*.webp' \
  --exclude='vendor/llama.cpp/models' --exclude='vendor/llama.cpp/docs' --exclude='vendor/llama.cpp/tests' \
  --exclude='vendor/llama.cpp/benches' --exclude='vendor/llama.cpp/tools/server' --exclude='vendor/llama.cpp/media' \
  --exclude='vendor/llama.cpp/gguf-py' --exclude='vendor/llama.cpp/examples' "$(basename "$src")"
# The build's own (pure Python), then localchat's runtime for each Python a GPU machine may run.
"$python" -m pip download -q -d "$out/wheels" --no-deps scikit-build-core pathspec packaging "gguf>=0.10" tqdm
for pyver in 3.10 3.11 3.12 3.13; do
  "$python" -m pip download -q -d "$out/wheels" --only-binary :all: --python-version "$pyver" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    "huggingface-hub>=2.4,<3" "platformdirs>=4" "psutil>=5.9" "PyYAML>=6" "Jinja2>=3.1.6" "nvidia-ml-py>=12" \
    "jsonschema>=4.20" "regex>=2023.0" "httpx>=0.27" "tomli>=2" "safetensors>=0.4" "tokenizers>=0.20"  # the last two: the gptq extra
done
du -sh "$out"
echo "carry $out (e.g. the device tool's carry) and run: bash scripts/gpu-bench.sh" >&2
