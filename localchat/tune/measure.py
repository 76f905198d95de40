"""Measure a model file on the real runtime: prefill/decode tokens/s, step cost by width, actual memory."""

from __future__ import annotations

import logging
import re
import statistics
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

# The planner quotes decode speed with this many tokens already in the KV cache; measuring at the
# same fill makes predicted and measured numbers comparable.
from ..planning.cost import DECODE_FILL
from ..workloads import document, greedy

MIB = 1 << 20
# llama.cpp reports each buffer it allocates, e.g. "CPU KV buffer size = 180.00 MiB"; the device
# name comes first and may be padded ("CPU  output buffer size").
_BUFFER_LINE = re.compile(r"(\S+)\s+(KV|compute|output|model|RS) buffer size\s*=\s*([\d.]+) MiB")
_KINDS = {"KV": "kv", "RS": "kv", "compute": "compute", "output": "output", "model": "mapped"}
WIDTHS = tuple(range(1, 9))
CHUNKS = (16, 64, 128, 256)


@dataclass(slots=True)
class MemoryUse:
    """Bytes llama.cpp really allocated: weights (llama_model_size) and the buffers it logged."""

    weights: int = 0
    kv: int = 0
    compute: int = 0
    output: int = 0
    mapped: int = 0            # the model buffer as logged (weights plus alignment), for reference

    @property
    def total(self) -> int:
        """What the planner's weights + KV + compute estimate should match."""
        return self.weights + self.kv + self.compute + self.output


@dataclass(slots=True)
class Measurement:
    """What one model file does on this machine."""

    path: str
    n_ctx: int
    n_threads: int
    prefill_tps: float
    decode_tps: float
    decode_fill: int
    memory: MemoryUse
    step_ms: dict[int, float] = field(default_factory=dict)    # decode step time by batch width
    chunk_ms: dict[int, float] = field(default_factory=dict)   # prompt chunk step time by chunk size
    seconds: float = 0.0

    def to_dict(self) -> dict:
        """Plain data for JSON (widths become string keys there)."""
        return {**asdict(self), "memory": {**asdict(self.memory), "total": self.memory.total}}

    @classmethod
    def from_dict(cls, data: dict) -> "Measurement":
        """Read `to_dict` output back."""
        memory = {k: v for k, v in data["memory"].items() if k != "total"}
        return cls(**{**data, "memory": MemoryUse(**memory),
                      "step_ms": {int(k): v for k, v in data.get("step_ms", {}).items()},
                      "chunk_ms": {int(k): v for k, v in data.get("chunk_ms", {}).items()}})


class _BufferLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.sizes: dict[str, int] = defaultdict(int)

    def emit(self, record: logging.LogRecord) -> None:
        match = _BUFFER_LINE.search(record.getMessage())
        if match:
            self.sizes[_KINDS[match.group(2)]] += int(float(match.group(3)) * MIB)


@contextmanager
def capture_buffers() -> Iterator[dict[str, int]]:
    """Collect llama.cpp's buffer-size lines logged inside the block: {'kv': bytes, 'compute': ...}."""
    logger = logging.getLogger("localchat.llama_cpp")
    handler = _BufferLog()
    level, propagate = logger.level, logger.propagate
    shown = logger.isEnabledFor(logging.DEBUG)
    logger.addHandler(handler)
    if not shown:
        # The lines are DEBUG records; let them reach our handler without printing them anywhere.
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
    try:
        yield handler.sizes
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def _speeds(engine, fill: int, n_decode: int, repeats: int) -> tuple[float, float]:
    """Prefill tokens/s over the KV growing to `fill` in chunks, then decode tokens/s at that fill."""
    from ..runtime.engine import Request

    text = document(23 * (fill // 8))
    lines = text.split("\n")
    tokens_per_line = max(1, len(engine.worker.tokenize(text)) / len(lines))
    stages = max(1, min(repeats + 1, fill // 256))
    prefill, decode = [], []
    # Each stage extends the previous prompt: the engine reuses the resident prefix, so every stage
    # prefills only new tokens, and the last stage leaves `fill` tokens in the cache for decode runs.
    for stage in range(1, stages + 1):
        num_lines = int(fill * stage / stages / tokens_per_line)
        prompt = "\n".join(lines[:num_lines]) + "\n"
        stats = engine.submit(Request(prompt=prompt, sampling=greedy(n_decode))).result().stats
        if stats.prompt_tokens - stats.cached_tokens >= 64:
            prefill.append(stats.prefill_tokens_per_s)
    for _ in range(repeats):
        stats = engine.submit(Request(prompt=prompt, sampling=greedy(n_decode))).result().stats
        decode.append(stats.tokens_per_s)
    return statistics.median(prefill or [0.0]), statistics.median(decode)


def _step_costs(engine, widths: tuple[int, ...], chunks: tuple[int, ...], n_steps: int) -> tuple[dict, dict]:
    """Median step time by decode width (w sequences decoding together) and by prompt chunk size."""
    from ..runtime.engine import Request

    engine.step_log = []
    for width in widths:
        streams = [engine.submit(Request(prompt=f"Count from {width * 100 + i}: {width * 100 + i},",
                                         sampling=greedy(n_steps))) for i in range(width)]
        for stream in streams:
            stream.result()
    decode_log, engine.step_log = engine.step_log, []
    for size in chunks:
        # Alone in the engine, a prompt of `size` tokens is one prefill step of (nearly) that width.
        engine.submit(Request(prompt=document(23 * max(1, size // 20), seed=1000 + size), sampling=greedy(1))).result()
    chunk_log, engine.step_log = engine.step_log, None
    by_width: dict[int, list[float]] = defaultdict(list)
    for _, seconds, width, decode_rows in decode_log:
        if decode_rows == width:  # a pure decode step: every row is one sequence's next token
            by_width[width].append(seconds * 1000)
    by_chunk: dict[int, list[float]] = defaultdict(list)
    for _, seconds, width, decode_rows in chunk_log:
        if decode_rows == 0 and width > 1:
            by_chunk[width].append(seconds * 1000)
    step_ms = {w: round(statistics.median(v), 3) for w, v in sorted(by_width.items())}
    chunk_ms = {w: round(statistics.median(v), 3) for w, v in sorted(by_chunk.items())}
    return step_ms, chunk_ms


def measure(path: str | Path, n_ctx: int = 4096, n_threads: int = 0, n_gpu_layers: int = 0,
            fill: int = DECODE_FILL, n_decode: int = 32, repeats: int = 3, widths: tuple[int, ...] = WIDTHS,
            chunks: tuple[int, ...] = CHUNKS) -> Measurement:
    """Load `path` once and time it: a few seconds for a 135M model at the default sizes."""
    import llama_cpp

    from ..runtime.engine import Engine, EngineConfig
    from ..runtime.workers.worker import WorkerConfig, default_threads

    started = time.perf_counter()
    n_threads = n_threads or default_threads()
    fill = max(64, min(fill, n_ctx - n_decode - 64))
    config = EngineConfig(worker=WorkerConfig(n_ctx=n_ctx, n_batch=512, n_threads=n_threads,
                                                n_gpu_layers=n_gpu_layers))
    with capture_buffers() as sizes:
        engine = Engine.load(path, config)
    try:
        memory = MemoryUse(weights=int(llama_cpp.llama_model_size(engine.worker.model)), **dict(sizes))
        prefill_tps, decode_tps = _speeds(engine, fill, n_decode, repeats)
        step_ms, chunk_ms = _step_costs(engine, widths, chunks, n_steps=6) if widths or chunks else ({}, {})
    finally:
        engine.close()
    return Measurement(path=str(path), n_ctx=engine.n_ctx, n_threads=n_threads, prefill_tps=round(prefill_tps, 1),
                       decode_tps=round(decode_tps, 1), decode_fill=fill, memory=memory, step_ms=step_ms,
                       chunk_ms=chunk_ms, seconds=round(time.perf_counter() - started, 2))
