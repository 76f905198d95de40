"""Planner accuracy: predicted vs actual memory and decode speed for every model file loadable here.

    python benchmarks/planner_accuracy.py [--n-ctx N] [--threads N] [--output FILE.md]

For each file (the SmolLM2-135M Q4_1 file and its Q8_0 / F16 requantizations) the planner's
prediction comes from the file's own GGUF header facts and this machine's probe; the actual
memory is llama.cpp's model size plus the KV, compute and output buffers it logs, and decode
is measured on our runtime with the planner's KV fill. Goals: memory within 10%, decode within 25%.
Each file is measured in its own process (see localchat.bench.isolated).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from localchat.bench_report import isolated, machine_facts
from localchat.hardware.probe import probe
from localchat.models.catalog import facts_from_gguf
from localchat.models.derive import requantize
from localchat.models.gguf_info import read_gguf
from localchat.models.resolve import resolve_model
from localchat.planning.cost import DECODE_FILL
from localchat.runtime import llama_log
from localchat.tune.calibrate import predict
from localchat.tune.measure import Measurement, measure

MEMORY_GOAL, DECODE_GOAL = 0.10, 0.25


def _measure(path: str, n_ctx: int, n_threads: int) -> dict:
    return measure(path, n_ctx=n_ctx, n_threads=n_threads, fill=DECODE_FILL, n_decode=48, repeats=3,
                   widths=(), chunks=()).to_dict()


def _error(predicted: float, actual: float) -> float:
    return (predicted - actual) / actual if actual else float("inf")


def _mib(n: float) -> str:
    return f"{n / 2**20:.0f}"


def run(n_ctx: int, threads: int | None = None) -> str:
    hardware = probe()
    if threads:
        # Plan for the cores we measure with (on a shared machine, fewer than it has).
        hardware = dataclasses.replace(hardware, physical_cores=threads, logical_cores=threads)
    source = resolve_model("smollm2-135m")
    llama_log.install()  # the quantizer's per-tensor lines go to our (quiet) logger, not the terminal
    files = [("Q4_1", source), ("Q8_0", requantize(source, "Q8_0")), ("F16", requantize(source, "F16"))]
    rows = ["| file | predicted MiB (weights + KV + compute) | actual MiB (weights + KV + compute + output) "
            "| memory error | predicted decode tok/s | measured decode tok/s | decode error "
            "| predicted / measured prefill tok/s |",
            "|---|---|---|---|---|---|---|---|"]
    for quant, path in files:
        key = f"smollm2-135m-{quant.lower()}"
        facts = facts_from_gguf(read_gguf(path), key, path.stat().st_size, family="smollm2")
        file_quant = next(iter(facts.files))
        p = predict(hardware, {key: facts}, key, file_quant, n_ctx)
        assert p is not None, f"the planner cannot place {path.name} at n_ctx {n_ctx}"
        m = Measurement.from_dict(isolated(_measure, str(path), n_ctx, hardware.physical_cores))
        mem_err, dec_err = _error(p.memory, m.memory.total), _error(p.decode_tps, m.decode_tps)
        mark = lambda err, goal: "ok" if abs(err) <= goal else "MISS"  # noqa: E731
        rows.append(
            f"| {path.name} | {_mib(p.memory)} ({_mib(p.weights)} + {_mib(p.kv)} + {_mib(p.compute)}) "
            f"| {_mib(m.memory.total)} ({_mib(m.memory.weights)} + {_mib(m.memory.kv)} + {_mib(m.memory.compute)} "
            f"+ {_mib(m.memory.output)}) | {mem_err:+.1%} {mark(mem_err, MEMORY_GOAL)} "
            f"| {p.decode_tps:.0f} | {m.decode_tps:.0f} | {dec_err:+.1%} {mark(dec_err, DECODE_GOAL)} "
            f"| {p.prefill_tps:.0f} / {m.prefill_tps:.0f} |")
    bandwidth = f"{hardware.ram_bandwidth / 1e9:.1f} GB/s" if hardware.ram_bandwidth else "not measured"
    head = (f"Planner accuracy, n_ctx {n_ctx}, {hardware.physical_cores} threads, decode at {DECODE_FILL} tokens of KV fill, default efficiency "
            f"factors (no tuned corrections).\nMachine: {machine_facts()}; host bandwidth {bandwidth}.\n"
            f"Goals: memory within {MEMORY_GOAL:.0%}, decode within {DECODE_GOAL:.0%}.\n")
    return head + "\n" + "\n".join(rows) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-ctx", type=int, default=4096, dest="n_ctx", help="context to plan and load (default 4096)")
    parser.add_argument("--threads", type=int, help="threads to measure and plan with (default: physical cores)")
    parser.add_argument("--output", type=Path, help="also write the Markdown here")
    args = parser.parse_args()
    report = run(args.n_ctx, args.threads)
    print(report)
    if args.output:
        args.output.write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
