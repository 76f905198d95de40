"""The single-stream table on a GPU: ours vs `Llama` vs llama-bench, every layer offloaded, with %
of the GPU's bandwidth roofline. Run by scripts/gpu-bench.sh (LOCALCHAT_BENCH_GPU_LAYERS=999).

    python benchmarks/gpu.py MODEL.gguf [--repeats 3] [--output FILE.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from localchat.bench import Report, isolated, llama_bench, our_llama_bench, single_stream
from localchat.hardware.probe import probe


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output")
    args = parser.parse_args()
    hardware = isolated(probe, True)
    report = Report()
    emit = report.emit
    for gpu in hardware.gpus:
        emit(f"GPU {gpu.index}: {gpu.name}, {gpu.memory_total / 2**30:.0f} GiB, bandwidth "
             f"{(gpu.bandwidth or 0) / 1e9:.0f} GB/s ({'measured' if gpu.measured_bandwidth else 'spec'})")
    emit("")
    s = single_stream(args.model, args.repeats, n_decode=128, n_prefill=512)
    pre, dec = [s["ours_prefill"], s["ref_prefill"]], [s["ours_decode"], s["ref_decode"]]
    bench = our_llama_bench()
    if bench:
        p, d = llama_bench(bench, args.model, args.repeats)
        pre.append(p)
        dec.append(d)
    bandwidth = hardware.gpus[0].bandwidth if hardware.gpus else None
    roofline = bandwidth / args.model.stat().st_size if bandwidth else 0.0
    emit(f"### {args.model.name}, all layers on GPU 0 (medians of {args.repeats})")
    emit("")
    emit("| | ours | Llama | llama-bench (ours) | ours / best |")
    emit("|---|---|---|---|---|")
    emit("| prefill-512 | " + " | ".join(f"{v:.0f} tok/s" for v in pre) + f" | {pre[0] / max(pre):.2f} |")
    emit("| decode | " + " | ".join(f"{v:.1f} tok/s" for v in dec) + f" | {dec[0] / max(dec):.2f} |")
    if roofline:
        emit("")
        emit(f"Decode roofline {roofline:.0f} tok/s (bandwidth / file size): ours at {100 * dec[0] / roofline:.0f}%.")
    report.save(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
