"""The same answer on each device this install can use, side by side: where llama.cpp put the layers,
prompt and decode speed (medians), and whether the greedy tokens match the CPU's. On a machine without
a GPU, run it with `GGML_VK_VISIBLE_DEVICES=0,0` (Mesa's llvmpipe as two devices) to see the GPU path
at a CPU's speed; on a GPU machine it is the table of what each backend gives.

    GGML_VK_VISIBLE_DEVICES=0,0 python benchmarks/devices.py MODEL.gguf [--repeats 3] [--output FILE.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from localchat.bench_report import Report
from localchat.hardware import HardwareInfo
from localchat.planning.fit import ModelSize
from localchat.planning.placements import arrange
from localchat.runtime.backends.devices import usable_here
from localchat.runtime.engine import Engine, EngineConfig, Request
from localchat.runtime.sampling import SamplingParams
from localchat.runtime.worker_types import WorkerConfig


def prompt(run: int) -> list[dict]:
    """A prompt of its own per run (a shared one would be read once, then reused from the KV cache)."""
    return [{"role": "user", "content": f"Run {run}. Summarise in one line: " + " ".join(
        f"Note {i}: the depot in district {(i + run) % 7} stores {i * 13 % 101} crates." for i in range(12))}]


def measure(model: Path, config: EngineConfig, tokens: int, repeats: int) -> dict:
    """Median prompt and decode speed over `repeats` answers (the first, which compiles shaders, left out)."""
    runs = []
    with Engine.load(model, config) as engine:
        for run in range(repeats + 1):
            runs.append(engine.submit(Request(messages=prompt(run), sampling=SamplingParams(
                temperature=0.0, max_tokens=tokens, ignore_eos=True))).result())
        placed = engine.residences()["model"]
    timed = runs[1:]
    return {"placed": placed.text(), "tokens": runs[0].token_ids,
            "read": statistics.median(r.stats.prompt_tokens - r.stats.cached_tokens for r in timed),
            "prefill": statistics.median(r.stats.prefill_tokens_per_s for r in timed),
            "decode": statistics.median(r.stats.tokens_per_s for r in timed)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", type=Path)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output")
    args = parser.parse_args()
    hardware = usable_here(HardwareInfo(physical_cores=2, ram_total=16 << 30))
    base = WorkerConfig(n_ctx=1024, n_seq_max=1)
    rows = {"CPU": EngineConfig(worker=base)}
    for gpu in hardware.gpus:
        rows[f"{gpu.device} ({gpu.name})"] = EngineConfig.placed(
            arrange("single", hardware, WorkerConfig(n_ctx=1024, n_seq_max=1, n_gpu_layers=-1), devices=str(gpu.index)))
    if len(hardware.gpus) >= 2:
        size = ModelSize.of(args.model)
        rows["layer split over GPU 0 and 1"] = EngineConfig.placed(arrange("layer-split", hardware, base, size, "0,1"))
    report = Report()
    report.emit(f"{args.model.name}: {args.tokens} tokens greedy after a prompt, median of {args.repeats} "
                "(a first answer, which compiles the GPU's shaders, left out)\n")
    report.emit("| device | where llama.cpp put the layers | prompt tokens read | prompt tok/s | decode tok/s "
                "| tokens as the CPU's |")
    report.emit("|---|---|---|---|---|---|")
    cpu_tokens = None
    for name, config in rows.items():
        found = measure(args.model, config, args.tokens, args.repeats)
        cpu_tokens = cpu_tokens or found["tokens"]
        same = "same" if found["tokens"] == cpu_tokens else \
            f"{sum(a == b for a, b in zip(found['tokens'], cpu_tokens))}/{len(cpu_tokens)} alike"
        report.emit(f"| {name} | {found['placed']} | {found['read']:.0f} | {found['prefill']:.1f} | "
                    f"{found['decode']:.1f} | {same} |")
    report.save(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
