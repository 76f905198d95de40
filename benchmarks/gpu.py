"""The single-stream table on a GPU: ours vs `Llama` vs llama-bench, every layer offloaded, with %
of the GPU's bandwidth roofline. Run by scripts/gpu-bench.sh (LOCALCHAT_BENCH_GPU_LAYERS=999).

    python benchmarks/gpu.py MODEL.gguf [--repeats 3] [--output FILE.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from localchat.bench import single_stream_table
from localchat.bench_report import Report, isolated
from localchat.hardware.probe import probe


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output")
    args = parser.parse_args()
    hardware = isolated(probe, True)
    report = Report()
    for gpu in hardware.gpus:
        report.emit(f"GPU {gpu.index}: {gpu.name}, {gpu.memory_total / 2**30:.0f} GiB, bandwidth "
                    f"{(gpu.bandwidth or 0) / 1e9:.0f} GB/s ({'measured' if gpu.measured_bandwidth else 'spec'})")
    report.emit("")
    bandwidth = hardware.gpus[0].bandwidth if hardware.gpus else None
    single_stream_table(report.emit, {f"{args.model.name}, all layers on GPU 0": args.model}, args.repeats,
                        quick=False, bandwidth=bandwidth, where="GPU 0")
    report.save(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
