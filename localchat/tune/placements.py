"""Placements measured on the real hardware: a mixed workload per candidate, and the rule that keeps one.

The workload is what PD split is for: chats stream while a long document is read. Each candidate
runs it on the real model; a split is kept only where it measurably wins over one device.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from ..workloads import document
from ..errors import LocalchatError, PlacementError
from ..hardware import HardwareInfo
from ..runtime.devices import Arrangement, ModelSize, arrange
from ..runtime.engine import Engine, EngineConfig, Request
from ..runtime.events import TextDelta
from ..runtime.sampling import SamplingParams
from ..runtime.worker import WorkerConfig

# A split must cut the streaming chats' worst latency beside a long read by this much...
MIN_BUSY_GAIN = 0.25
# ...without making a chat alone slower than this fraction of one device's speed.
MIN_IDLE_SPEED = 0.9
CANDIDATES = ("single", "layer-split", "pd-split", "draft-gpu")


@dataclass(slots=True)
class MixedResult:
    """Inter-token gaps of streaming chats alone and while a document is read, and the read itself."""

    placement: str
    idle_gaps_ms: list[float] = field(default_factory=list)
    busy_gaps_ms: list[float] = field(default_factory=list)
    busy_ttft_ms: list[float] = field(default_factory=list)
    doc_tokens: int = 0
    doc_ttft_ms: float = 0.0
    transfer_ms: float = 0.0
    transfer_bytes: int = 0

    @property
    def idle_p50(self) -> float:
        return statistics.median(self.idle_gaps_ms)

    @property
    def busy_p50(self) -> float:
        return statistics.median(self.busy_gaps_ms)

    @property
    def busy_p99(self) -> float:
        ordered = sorted(self.busy_gaps_ms)
        return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]

    def summary(self) -> dict:
        return {"placement": self.placement, "idle_itl_p50_ms": round(self.idle_p50, 2),
                "busy_itl_p50_ms": round(self.busy_p50, 2), "busy_itl_p99_ms": round(self.busy_p99, 2),
                "busy_chat_ttft_ms": round(statistics.median(self.busy_ttft_ms), 1) if self.busy_ttft_ms else None,
                "doc_tokens": self.doc_tokens, "doc_ttft_ms": round(self.doc_ttft_ms, 1),
                "kv_transfer_ms": round(self.transfer_ms, 1), "kv_transfer_bytes": self.transfer_bytes}


def _turn(engine: Engine, n: int, n_chats: int, tokens: int, gaps: list, ttfts: list,
          stop: threading.Event | None = None, streaming: threading.Event | None = None) -> None:
    """`n_chats` answers at once, each read on its own thread so stamps are taken on arrival.
    `streaming` is set at the first token; each answer is cancelled at its first token after `stop`."""
    def read(i: int) -> None:
        t0 = time.perf_counter()
        stream = engine.submit(Request(prompt=f"Turn {n}.{i}: a short story about a lighthouse keeper:",
                                       sampling=SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)))
        last = None
        for event in stream:
            if isinstance(event, TextDelta):
                now = time.perf_counter()
                if last is None:
                    ttfts.append((t0, now - t0))
                    if streaming is not None:
                        streaming.set()
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


def mixed_workload(engine: Engine, placement: str, doc_tokens: int, turn_tokens: int = 96,
                   n_chats: int = 2) -> MixedResult:
    """Chats alone, then chats while a ~`doc_tokens` document is read; gaps that overlap the read count.
    The read starts once the chats stream, so even a read shorter than one step lies inside a gap."""
    idle: list = []
    for n in range(2):
        _turn(engine, n, n_chats, turn_tokens, idle, [])
    window: dict = {}
    done, streaming = threading.Event(), threading.Event()

    def read_document() -> None:
        streaming.wait()
        window["start"] = time.perf_counter()
        window["result"] = engine.submit(Request(prompt=document(doc_tokens, seed=7),
                                                 sampling=SamplingParams(temperature=0.0, max_tokens=1))).result()
        window["end"] = time.perf_counter()
        done.set()

    busy: list = []
    ttfts: list = []
    reader = threading.Thread(target=read_document)
    reader.start()
    n = 2
    while not done.is_set():
        _turn(engine, n, n_chats, turn_tokens, busy, ttfts, done, streaming)
        n += 1
    reader.join()
    start, end, stats = window["start"], window["end"], window["result"].stats
    return MixedResult(
        placement, idle_gaps_ms=[(b - a) * 1000 for a, b in idle],
        busy_gaps_ms=[(b - a) * 1000 for a, b in busy if a < end and b > start],
        busy_ttft_ms=[t * 1000 for t0, t in ttfts if start < t0 < end],
        doc_tokens=stats.prompt_tokens, doc_ttft_ms=stats.ttft_ms,
        transfer_ms=stats.kv_transfer_ms, transfer_bytes=stats.kv_transfer_bytes)


def measure_placement(path: Path, layout: Arrangement, doc_tokens: int, draft: Path | None = None) -> MixedResult:
    """Load the model as `layout` says and run the mixed workload on it."""
    def roomy(worker):  # the document and the chats must fit beside each other
        return dataclasses.replace(worker, n_ctx=max(worker.n_ctx, doc_tokens + 2048)) if worker else None

    config = EngineConfig(worker=roomy(layout.worker), prefill=roomy(layout.prefill), draft_worker=roomy(layout.draft),
                          draft_path=draft if layout.draft is not None else None)
    with Engine.load(path, config) as engine:
        return mixed_workload(engine, layout.placement, doc_tokens)


def keep_placement(results: list[MixedResult], base_name: str = "single") -> tuple[MixedResult, str]:
    """The baseline's result (one device, or the planner's layout) unless a split cuts busy p99 enough
    without slowing a chat alone."""
    base = next((r for r in results if r.placement == base_name), results[0])
    best, why = base, f"{base.placement}: no other placement measured better"
    for r in results:
        if r is base:
            continue
        gain = 1 - r.busy_p99 / base.busy_p99
        idle_speed = base.idle_p50 / r.idle_p50
        if gain >= MIN_BUSY_GAIN and idle_speed >= MIN_IDLE_SPEED and r.busy_p99 < best.busy_p99:
            best, why = r, (f"{r.placement}: chats beside a long read {gain:.0%} smoother (p99 {r.busy_p99:.0f} vs "
                            f"{base.busy_p99:.0f} ms), alone {idle_speed:.0%} of one device's speed")
        elif best is base:
            why = (f"{base.placement}: {r.placement} changed busy p99 by {-gain:+.0%} and ran a chat alone at "
                   f"{idle_speed:.0%} of its speed (needs -{MIN_BUSY_GAIN:.0%} and {MIN_IDLE_SPEED:.0%})")
    return best, why


def tune_placement(path: Path, hardware: HardwareInfo, base: WorkerConfig, planned: str, draft: Path | None,
                   doc_tokens: int, out: TextIO) -> tuple[str, list[dict], str]:
    """Measure every placement this machine can run for the kept model and keep the winner.
    Returns (the placement setting kept, each one's numbers, why). One that fails is noted and skipped."""
    size = ModelSize.of(path)
    draft_size = ModelSize.of(draft) if draft else None
    results, rows = [], []
    for name in CANDIDATES:
        try:
            layout = arrange(name, hardware, base, size, draft_size=draft_size)
        except PlacementError as exc:
            rows.append({"placement": name, "status": f"not possible: {exc}"})
            continue
        print(f"measuring placement {name} ({layout.description}) ...", file=out, flush=True)
        try:
            result = measure_placement(path, layout, doc_tokens, draft)
        except LocalchatError as exc:
            rows.append({"placement": name, "status": f"failed: {exc}"})
            continue
        results.append(result)
        rows.append({**result.summary(), "status": "measured", "description": layout.description})
        print(f"  idle ITL p50 {result.idle_p50:.1f} ms; beside a {result.doc_tokens}-token read p50 "
              f"{result.busy_p50:.1f} ms, p99 {result.busy_p99:.1f} ms", file=out)
    if not results:
        return planned, rows, "no placement could be measured; the planner's choice stands"
    kept, why = keep_placement(results, planned)
    for row in rows:
        if row["placement"] == kept.placement:
            row["status"] = "kept"
    return kept.placement, rows, why
