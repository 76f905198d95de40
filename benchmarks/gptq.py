"""GPTQ-4bit on the torch worker vs the GGUF Q4_1 file on llama.cpp: the same SmolLM2-135M, the same
engine, side by side in one run. Decode and prefill tokens/s (medians) and memory.

    python benchmarks/gptq.py [--repeats 3] [--prompt-tokens 512] [--decode-tokens 64] [--threads 2]
                              [--device cuda]

The GPTQ checkpoint is made here as the tests make it (localchat/gptq/derive.py), cached.
--device cuda (scripts/gpu-bench.sh on an NVIDIA GPU): both on the GPU, every GGUF layer offloaded and the
checkpoint on torch's CUDA device; then the planner's price of the checkpoint on this GPU at its prior
share of llama.cpp's roofline (planning/gptq_options.py: TORCH_GPTQ_EFFICIENCY) against the measured
decode speed gives the measured share, as `localchat tune` computes it (tune/formats.py: torch_share).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from pathlib import Path

import psutil
import torch

from localchat.gptq import derive
from localchat.models.derive import requantize
from localchat.models.resolve import resolve_model
from localchat.paths import models_dir
from localchat.runtime.engine import Engine, EngineConfig, Request
from localchat.runtime.workers.worker import WorkerConfig
from localchat.workloads import document, greedy

DATA = Path(__file__).parent.parent / "tests" / "data"
CALIBRATION = ("gptq-calibration.txt", "gptq-calibration-sampled.txt")  # as tests/test_gptq.py reads them


def gptq_checkpoint(gguf: Path, bits: int = 4) -> Path:
    dense = derive.hf_from_gguf(requantize(gguf, "F16"), models_dir() / "SmolLM2-135M-Instruct-hf")
    calibration = derive.calibration_chunks(dense, "\n\n".join((DATA / name).read_text() for name in CALIBRATION))
    name = f"SmolLM2-135M-Instruct-GPTQ-{bits}bit-g128"
    return derive.quantize_folder(dense, models_dir() / name, calibration, bits=bits, group=128)


def measure(path: Path, args: argparse.Namespace) -> dict[str, float]:
    rss_before = psutil.Process().memory_info().rss
    on_gpu = args.device == "cuda"
    config = EngineConfig(worker=WorkerConfig(n_ctx=2048, n_batch=512, n_seq_max=2, n_threads=args.threads,
                                              n_gpu_layers=999 if on_gpu else 0, torch_device=args.device),
                          adapt_threads=False)
    with Engine.load(path, config) as engine:
        rss_loaded = psutil.Process().memory_info().rss
        prompt = document(args.prompt_tokens)
        decode, prefill = [], []
        for i in range(args.repeats + 1):  # the first run warms up
            # A new first token each time, so no prefix is reused from the run before.
            result = engine.submit(Request(prompt=f"{i}. {prompt}", sampling=greedy(args.decode_tokens))).result()
            if i:
                decode.append(result.stats.tokens_per_s)
                prefill.append(result.stats.prefill_tokens_per_s)
        rss_peak = psutil.Process().memory_info().rss
        return {"decode": statistics.median(decode), "prefill": statistics.median(prefill),
                "prompt_tokens": result.stats.prompt_tokens, "loaded_mb": (rss_loaded - rss_before) / 1e6,
                "peak_mb": (rss_peak - rss_before) / 1e6, "describe": engine.worker.describe()}


def folder_mb(path: Path) -> float:
    files = [path] if path.is_file() else list(path.iterdir())
    return sum(f.stat().st_size for f in files) / 1e6


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: both on the GPU (all GGUF layers, the checkpoint on torch's CUDA device)")
    args = parser.parse_args()
    gguf = resolve_model("smollm2-135m")
    gptq = gptq_checkpoint(gguf)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, {args.threads} threads, "
          f"torch {torch.__version__}; load average {os.getloadavg()[0]:.1f}")
    print("| runner | files MB | decode tok/s | prefill tok/s | RSS after load MB | RSS peak MB |")
    print("|---|---|---|---|---|---|")
    measured = {}
    for label, path in (("GGUF Q4_1, llama.cpp", gguf), ("GPTQ 4-bit g128, torch", gptq)):
        m = measured[path] = measure(path, args)
        print(f"| {label} ({m['describe']}) | {folder_mb(path):.0f} | {m['decode']:.1f} | {m['prefill']:.1f} | "
              f"{m['loaded_mb']:.0f} | {m['peak_mb']:.0f} |", flush=True)
    print(f"\nGPTQ on torch decodes at {measured[gptq]['decode'] / measured[gguf]['decode']:.2f}x the GGUF file's "
          f"speed on llama.cpp ({args.device}).")
    if args.device == "cuda":
        print(measured_share(gptq, measured[gptq]["decode"]))
    return 0


def measured_share(folder: Path, decode_tps: float) -> str:
    """The torch kernels' share of llama.cpp's roofline the measured decode speed implies on this GPU."""
    import dataclasses

    from localchat.hardware.probe import probe
    from localchat.models.catalog import ModelFile, load_catalog
    from localchat.planning.cost import DECODE_FILL, DEFAULT_EFFICIENCY, devices_of
    from localchat.planning.gptq_options import TORCH_GPTQ_EFFICIENCY, gptq_options
    from localchat.runtime.backends.gpus import usable
    from localchat.tune.formats import torch_share

    facts = load_catalog()["smollm2-135m"]
    quant = "gptq-int4"
    facts = dataclasses.replace(facts, files={**facts.files, quant: ModelFile(
        quant, folder.name, int(folder_mb(folder) * 1e6), format="gptq", bits=4)})
    devices, _ = devices_of(usable(probe(False)), dict(DEFAULT_EFFICIENCY))
    options = gptq_options(facts, quant, 2048, devices, dict(DEFAULT_EFFICIENCY), DECODE_FILL)
    if not options:
        return "the planner places no GPTQ checkpoint on this machine's GPUs: no share to measure"
    predicted = options[0].plain_decode_tps
    share = torch_share({}, decode_tps, predicted)
    return (f"the planner predicts {predicted:.1f} tok/s for the checkpoint at its prior torch_gptq "
            f"{TORCH_GPTQ_EFFICIENCY:g}; measured {decode_tps:.1f} tok/s: torch_gptq measured = {share:g} "
            f"(planning/gptq_options.py: TORCH_GPTQ_EFFICIENCY)")


if __name__ == "__main__":
    sys.exit(main())
