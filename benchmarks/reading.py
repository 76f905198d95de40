"""How fast a document is read, alone and beside a streaming chat: the trade-off between the document's
pace and the chat's inter-token gaps, for fixed prompt budgets per step and for the adaptive one.

    python benchmarks/reading.py [MODEL.gguf] [--doc-tokens 5000] [--output FILE.md]

Each point runs in a fresh process (two llama.cpp thread pools in one process fight over the cores).
"alone" is the document read with nothing else running (whole batches); the pace of each point is
that time over the document's time beside the chat.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from localchat.bench import _engine, latency_beside_prefill
from localchat.bench_report import Report, isolated
from localchat.runtime.engine import Request
from localchat.workloads import document, greedy

BUDGETS = (0, 4, 8, 16, 32, 64, 128)  # 0: adaptive


def alone(path: Path, doc_tokens: int, n_batch: int) -> float:
    """Seconds to read the document with nothing else running."""
    with _engine(path, n_ctx=8192 + 4096, n_batch=n_batch) as engine:
        engine.submit(Request(prompt="Warm up.", sampling=greedy(1))).result()
        t0 = time.perf_counter()
        engine.submit(Request(prompt=document(doc_tokens, seed=7), sampling=greedy(1))).result()
        return time.perf_counter() - t0


def state_costs(path: Path, doc_tokens: int) -> dict[str, float]:
    """The KV state of a read document on disk: its size, and the time to save and restore it."""
    import tempfile

    from localchat.runtime.kv.kv_disk import KVDiskCache
    from localchat.runtime.workers.worker import BatchRow, Worker, WorkerConfig

    worker = Worker(path, WorkerConfig(n_ctx=doc_tokens + 1024, n_seq_max=2, n_threads=2))
    try:
        tokens = worker.tokenize(document(doc_tokens, seed=9))
        for start in range(0, len(tokens), 512):
            worker.decode([BatchRow(0, tokens[start:start + 512], start, want_logits=False)])
        cache = KVDiskCache(Path(tempfile.mkdtemp()), worker.state_identity, max_bytes=1 << 40)
        t0 = time.perf_counter()
        data = worker.export_seq(0)
        t1 = time.perf_counter()
        cache.save(tokens, data)
        cache.flush()
        t2 = time.perf_counter()
        hit = cache.lookup(tokens + [0])
        loaded = cache.read(hit.entry)
        worker.seq_remove(0)  # as after a restart: the cells are free again
        t3 = time.perf_counter()
        assert worker.import_seq(0, loaded)
        t4 = time.perf_counter()
        cache.close()
        return {"tokens": len(tokens), "mb": len(data) / 1e6, "export_ms": (t1 - t0) * 1e3,
                "write_ms": (t2 - t1) * 1e3, "read_ms": (t3 - t2) * 1e3, "import_ms": (t4 - t3) * 1e3}
    finally:
        worker.close()


def main() -> int:
    from localchat.models.resolve import resolve_model

    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?", type=Path)
    parser.add_argument("--doc-tokens", type=int, default=5000)
    parser.add_argument("--state-only", action="store_true", help="only the KV state's size and save/restore times")
    parser.add_argument("--output")
    args = parser.parse_args()
    path = args.model or resolve_model("smollm2-135m")
    report = Report()
    report.emit(f"Reading a ~{args.doc_tokens}-token document: {path.name}")
    if not args.state_only:
        pace_table(report, path, args.doc_tokens)
    c = isolated(state_costs, path, args.doc_tokens)
    report.emit()
    report.emit(f"KV state of {c['tokens']:,} prompt tokens: {c['mb']:.0f} MB; saved in {c['export_ms']:.0f} ms "
                f"(export, engine thread) + {c['write_ms']:.0f} ms (write and fsync, its own thread); restored in "
                f"{c['read_ms']:.0f} ms (read and check, its own thread) + {c['import_ms']:.0f} ms (import, engine thread)")
    report.save(args.output)
    return 0


def pace_table(report: Report, path: Path, doc_tokens: int) -> None:
    """The document alone by n_batch, then beside a streaming chat by prompt budget per step."""
    report.emit()
    report.emit("| n_batch | document alone, s |")
    report.emit("|---:|---:|")
    for n_batch in (256, 512, 1024):
        report.emit(f"| {n_batch} | {isolated(alone, path, doc_tokens, n_batch):.2f} |")
    base = isolated(alone, path, doc_tokens, 512)
    report.emit()
    report.emit("| prompt tokens per step beside the chat | chat alone p50 ms | beside: p50 | p99 | max | "
                "document s | pace vs alone |")
    report.emit("|---|---:|---:|---:|---:|---:|---:|")
    for budget in BUDGETS:
        r = isolated(latency_beside_prefill, path, doc_tokens, 200, 512, budget)
        label = "adaptive" if budget == 0 else str(budget)
        report.emit(f"| {label} | {r['idle_p50']:.1f} | {r['p50']:.1f} | {r['p99']:.1f} | {r['max']:.0f} | "
                    f"{r['doc_s']:.2f} | {base / r['doc_s']:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
