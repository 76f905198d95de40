"""PD split vs one worker on a mixed workload: a long document is read while chats stream.

    python benchmarks/disagg.py [--quick] [--output FILE.md]

On a CPU-only machine the split is emulated: two workers with half the threads each, against one
worker with all of them and chunked prefill. Reported: inter-token latency of the streaming chats
while the document is read (p50, p99, against the same chats alone), TTFT of chat turns started
during the read and of the document itself, and the cost of moving KV state per 1k tokens.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

from localchat.bench import THREADS, Report, _percentile, document, isolated
from localchat.runtime.engine import Engine, EngineConfig, Request
from localchat.runtime.events import TextDelta
from localchat.runtime.sampling import SamplingParams
from localchat.runtime.worker import WorkerConfig


def _engine(path: Path, pd: bool, n_ctx: int) -> Engine:
    threads = max(1, THREADS // 2) if pd else THREADS
    worker = WorkerConfig(n_ctx=n_ctx, n_batch=512, n_seq_max=8, n_threads=threads)
    return Engine.load(path, EngineConfig(worker=worker, prefill=worker if pd else None))


def _turn(engine: Engine, n: int, n_chats: int, tokens: int, gaps: list[float], ttfts: list[float],
          stop: threading.Event | None = None) -> None:
    """`n_chats` chat answers at once, each read on its own thread so stamps are taken on arrival."""
    def read(i: int) -> None:
        t0 = time.perf_counter()
        stream = engine.submit(Request(prompt=f"Turn {n}.{i}: a short story about a lighthouse keeper:",
                                       sampling=SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)))
        last = None
        for event in stream:
            if isinstance(event, TextDelta):
                now = time.perf_counter()
                if last is None:
                    ttfts.append((now, now - t0))
                else:
                    gaps.append((last, now))
                last = now
                if stop is not None and stop.is_set():
                    stream.cancel()

    readers = [threading.Thread(target=read, args=(i,)) for i in range(n_chats)]
    for r in readers:
        r.start()
    for r in readers:
        r.join()


def mixed_workload(path: Path, pd: bool, doc_tokens: int, turn_tokens: int, n_chats: int) -> dict[str, float]:
    with _engine(path, pd, n_ctx=doc_tokens + 4096) as engine:
        idle_gaps: list = []
        for n in range(2):
            _turn(engine, n, n_chats, turn_tokens, idle_gaps, [])
        window: dict[str, float] = {}
        done = threading.Event()
        result: dict = {}

        def read_document() -> None:
            window["start"] = time.perf_counter()
            result["doc"] = engine.submit(Request(prompt=document(doc_tokens, seed=7),
                                                  sampling=SamplingParams(temperature=0.0, max_tokens=1))).result()
            window["end"] = time.perf_counter()
            done.set()

        busy_gaps: list = []
        busy_ttfts: list = []
        reader = threading.Thread(target=read_document)
        n = 2
        while not done.is_set():
            if n == 3:
                reader.start()
            _turn(engine, n, n_chats, turn_tokens, busy_gaps, busy_ttfts, done)
            n += 1
        reader.join()
    start, end = window["start"], window["end"]
    idle = [b - a for a, b in idle_gaps]
    busy = [b - a for a, b in busy_gaps if a < end and b > start]
    ttft = [t for stamp, t in busy_ttfts if start < stamp - t < end]
    stats = result["doc"].stats
    return {"idle_p50": statistics.median(idle) * 1000, "p50": statistics.median(busy) * 1000,
            "p99": _percentile(busy, 0.99) * 1000, "max": max(busy) * 1000,
            "chat_ttft": statistics.median(ttft) * 1000 if ttft else float("nan"),
            "doc_ttft": stats.ttft_ms, "doc_tokens": stats.prompt_tokens,
            "transfer_ms": stats.kv_transfer_ms, "transfer_bytes": stats.kv_transfer_bytes}


def main() -> int:
    from localchat.models.catalog import resolve_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output")
    args = parser.parse_args()
    path = resolve_model("smollm2-135m")
    doc_tokens, turn_tokens, n_chats = (2000, 96, 2) if args.quick else (6000, 160, 2)
    report = Report()
    emit = report.emit
    half = max(1, THREADS // 2)
    runs = {f"one worker, {THREADS} threads, chunked prefill": isolated(mixed_workload, path, False, doc_tokens,
                                                                        turn_tokens, n_chats),
            f"PD split, 2 workers x {half} thread(s)": isolated(mixed_workload, path, True, doc_tokens,
                                                                turn_tokens, n_chats)}
    emit(f"### Mixed workload, Q4_1: a ~{doc_tokens}-token document read while {n_chats} chats stream")
    emit("")
    emit("| layout | idle ITL p50 | busy ITL p50 | busy p99 | busy max | p99 / idle | chat TTFT while busy | "
         "document TTFT |")
    emit("|---|---|---|---|---|---|---|---|")
    for label, m in runs.items():
        emit(f"| {label} | {m['idle_p50']:.1f} ms | {m['p50']:.1f} ms | {m['p99']:.1f} ms | {m['max']:.0f} ms | "
             f"{m['p99'] / m['idle_p50']:.2f}x | {m['chat_ttft']:.0f} ms | {m['doc_ttft'] / 1000:.1f} s |")
    pd = list(runs.values())[1]
    per_k = 1000 / pd["doc_tokens"]
    emit("")
    emit(f"KV hand-over of the {pd['doc_tokens']}-token document: {pd['transfer_bytes'] / 2**20:.0f} MiB, "
         f"{pd['transfer_ms']:.0f} ms (export + import) = {pd['transfer_ms'] * per_k:.1f} ms and "
         f"{pd['transfer_bytes'] * per_k / 2**20:.1f} MiB per 1k tokens.")
    report.save(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
