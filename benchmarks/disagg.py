"""PD split vs one worker on a mixed workload: a long document is read while chats stream.

    python benchmarks/disagg.py [--quick] [--output FILE.md]

On a CPU-only machine the split is emulated: two workers with half the threads each, against one
worker with all of them and chunked prefill. Reported: inter-token latency of the streaming chats
while the document is read (p50, p99, against the same chats alone), TTFT of chat turns started
during the read and of the document itself, and the cost of moving KV state per 1k tokens. The
wizard (`localchat tune`) runs the same workload and keeps a split only where it wins.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from localchat.bench import THREADS
from localchat.bench_report import Report, isolated
from localchat.hardware import HardwareInfo
from localchat.planning.fit import ModelSize
from localchat.planning.placements import arrange
from localchat.runtime.workers.worker import WorkerConfig
from localchat.tune.placements import keep_placement, measure_placement


def main() -> int:
    from localchat.models.resolve import resolve_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=1, help="alternating runs of each layout")
    parser.add_argument("--output")
    parser.add_argument("--model", help="a GGUF file (default: the embedded SmolLM2)")
    parser.add_argument("--probe", action="store_true",
                        help="place on this machine's GPUs (single, layer split, PD split), not CPU workers")
    args = parser.parse_args()
    path = Path(args.model) if args.model else resolve_model("smollm2-135m")
    doc_tokens = 2000 if args.quick else 6000
    base = WorkerConfig(n_ctx=doc_tokens + 2048, n_threads=THREADS, n_gpu_layers=-1 if args.probe else 0)
    if args.probe:
        from localchat.hardware.probe import probe

        hardware = probe(measure=False)
        size = ModelSize.of(path)
        layouts = [arrange(p, hardware, base, size) for p in ("single", "layer-split", "pd-split")]
    else:
        cpu = HardwareInfo()
        layouts = [arrange("single", cpu, base), arrange("pd-split", cpu, base)]
    results = {layout.placement: [] for layout in layouts}
    for _ in range(args.repeats):
        for layout in layouts:
            results[layout.placement].append(isolated(measure_placement, path, layout, doc_tokens))
    report = Report()
    emit = report.emit
    emit(f"### Mixed workload, Q4_1: a ~{doc_tokens}-token document read while 2 chats stream")
    emit("")
    emit("| layout | idle ITL p50 | busy ITL p50 | busy p99 | p99 / idle | chat TTFT while busy | document TTFT |")
    emit("|---|---|---|---|---|---|---|")
    for layout in layouts:
        for r in results[layout.placement]:
            ttft = r.summary()["busy_chat_ttft_ms"]
            emit(f"| {layout.description} | {r.idle_p50:.1f} ms | {r.busy_p50:.1f} ms | {r.busy_p99:.1f} ms | "
                 f"{r.busy_p99 / r.idle_p50:.2f}x | {ttft if ttft is not None else '-'} ms | "
                 f"{r.doc_ttft_ms / 1000:.1f} s |")
    emit("")
    pd = results["pd-split"][-1]
    per_k = 1000 / pd.doc_tokens
    emit(f"KV hand-over of the {pd.doc_tokens}-token document: {pd.transfer_bytes / 2**20:.0f} MiB in "
         f"{pd.transfer_ms:.0f} ms (export + import): {pd.transfer_ms * per_k:.1f} ms and "
         f"{pd.transfer_bytes * per_k / 2**20:.1f} MiB per 1k tokens.")
    kept, why = keep_placement([results["single"][-1], pd])
    emit("")
    emit(f"The wizard's rule would keep: {why}.")
    report.save(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
