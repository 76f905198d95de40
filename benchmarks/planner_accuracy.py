"""Planner accuracy: predicted vs actual memory and decode speed for every model file loadable here.

    python benchmarks/planner_accuracy.py [--n-ctx N] [--threads N] [--runs N] [--output FILE.md]

For each file of two ladders, SmolLM2-135M (the Q4_1 file and its Q8_0, F16, Q4_K_M and Q5_K_M
requantizations) and gemma-3-270m (the real Q4_K_M file, a K-quant with sliding-window layers and a 262k
vocabulary, and its Q8_0, Q4_0 and Q5_K_M requantizations), the planner's prediction comes from the
file's own GGUF header facts and this machine's probe; the actual
memory is llama.cpp's model size plus the KV, compute and output buffers it logs, and decode
is measured on our runtime with the planner's KV fill. Goals: memory within 10%, decode within 25%.
Each file is measured in processes of its own (see localchat.bench.isolated), `--runs` times (3), and
its median decode and prefill compared: one run on a shared host can lose half its speed for seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

from localchat.bench_report import isolated, machine_facts
from localchat.hardware.probe import probe
from localchat.models.catalog import facts_from_gguf
from localchat.models.gguf_info import read_gguf
from localchat.planning.cost import DECODE_FILL
from localchat.tune.calibrate import predict
from localchat.tune.measure import Measurement, measure
from localchat.workloads import planner_ladders

MEMORY_GOAL, DECODE_GOAL = 0.10, 0.25


def _measure(path: str, n_ctx: int, n_threads: int) -> dict:
    return measure(path, n_ctx=n_ctx, n_threads=n_threads, fill=DECODE_FILL, n_decode=48, repeats=3,
                   widths=(), chunks=()).to_dict()


def _error(predicted: float, actual: float) -> float:
    return (predicted - actual) / actual if actual else float("inf")


def _mib(n: float) -> str:
    return f"{n / 2**20:.0f}"


def run(n_ctx: int, threads: int | None = None, runs: int = 3) -> str:
    hardware = probe()
    if threads:
        # Plan for the cores we measure with (on a shared machine, fewer than it has).
        hardware = dataclasses.replace(hardware, physical_cores=threads, logical_cores=threads)
    files = [(family, name, quant, path) for name, (family, ladder) in planner_ladders().items()
             for quant, path in ladder.items()]
    rows = ["| file | predicted MiB (weights + KV + compute) | actual MiB (weights + KV + compute + output) "
            "| memory error | predicted decode tok/s | measured decode tok/s | decode error "
            "| predicted / measured prefill tok/s |",
            "|---|---|---|---|---|---|---|---|"]
    for family, name, quant, path in files:
        key = f"{name}-{quant.lower()}"
        facts = facts_from_gguf(read_gguf(path), key, path.stat().st_size, family=family)
        file_quant = next(iter(facts.files))
        p = predict(hardware, {key: facts}, key, file_quant, n_ctx)
        assert p is not None, f"the planner cannot place {path.name} at n_ctx {n_ctx}"
        measured = [Measurement.from_dict(isolated(_measure, str(path), n_ctx, hardware.physical_cores))
                    for _ in range(runs)]
        m = dataclasses.replace(measured[0], decode_tps=statistics.median(x.decode_tps for x in measured),
                                prefill_tps=statistics.median(x.prefill_tps for x in measured))
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
            f"factors (no tuned corrections), the median of {runs} runs.\nMachine: {machine_facts()}; host bandwidth {bandwidth}.\n"
            f"Goals: memory within {MEMORY_GOAL:.0%}, decode within {DECODE_GOAL:.0%}.\n")
    return head + "\n" + "\n".join(rows) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-ctx", type=int, default=4096, dest="n_ctx", help="context to plan and load (default 4096)")
    parser.add_argument("--threads", type=int, help="threads to measure and plan with (default: physical cores)")
    parser.add_argument("--runs", type=int, default=3, help="measurements per file, the median compared (default 3)")
    parser.add_argument("--output", type=Path, help="also write the Markdown here")
    args = parser.parse_args()
    report = run(args.n_ctx, args.threads, args.runs)
    print(report)
    if args.output:
        args.output.write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
