"""`localchat bench`: the runtime benchmark, ours and llama-cpp-python's `Llama` side by side.

Numbers, not assertions: medians over repeats, ratios measured in one run, the machine's facts.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from .runtime.engine import Engine, EngineConfig, Request
from .runtime.events import TextDelta
from .runtime.sampling import SamplingParams
from .runtime.worker import WorkerConfig, default_threads

THREADS = default_threads()


def _engine(path: Path, n_ctx: int = 8192, n_batch: int = 512, step_budget: int = 0) -> Engine:
    worker = WorkerConfig(n_ctx=n_ctx, n_batch=n_batch, n_seq_max=8, n_threads=THREADS)
    return Engine.load(path, EngineConfig(worker=worker, step_budget=step_budget))


def _greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)


def document(n_tokens_approx: int, seed: int = 0) -> str:
    """Filler prose with numbered facts; about 23 tokens per line."""
    lines = [f"Record {seed}-{i}: shipment {i * 37 % 997} left dock {i % 13} carrying {i * 11 % 89} boxes."
             for i in range(n_tokens_approx // 23)]
    return "\n".join(lines)


def _ours_single(path: Path, prompt: str, short: str, n_decode: int) -> tuple[float, float]:
    with _engine(path, n_ctx=4096) as engine:
        pre = engine.submit(Request(prompt=prompt, sampling=_greedy(1))).result().stats
        dec = engine.submit(Request(prompt=short, sampling=_greedy(n_decode))).result().stats
    return pre.prefill_tokens_per_s, dec.tokens_per_s


def _reference_single(path: Path, prompt: str, short: str, n_decode: int) -> tuple[float, float]:
    from llama_cpp import Llama

    reference = Llama(str(path), n_ctx=4096, n_batch=512, n_threads=THREADS, flash_attn=True, verbose=False)
    tokens = reference.tokenize(prompt.encode())
    t0 = time.perf_counter()
    reference.eval(tokens)
    reference.sample(temp=0.0)
    prefill = len(tokens) / (time.perf_counter() - t0)
    reference.reset()
    reference.eval(reference.tokenize(short.encode()))
    token = reference.sample(temp=0.0)
    t0 = time.perf_counter()
    for _ in range(n_decode - 1):
        reference.eval([token])
        token = reference.sample(temp=0.0)
    decode = (n_decode - 1) / (time.perf_counter() - t0)
    reference.close()
    return prefill, decode


def isolated(fn, *args):
    """Run one measurement in a fresh process: two llama.cpp thread pools in one process fight
    over the cores and halve both sides' speed."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def single_stream(path: Path, repeats: int, n_decode: int, n_prefill: int) -> dict[str, float]:
    """Decode and prefill tokens/s: ours vs Llama, same threads, batch and attention, alternating runs."""
    ours_dec, ours_pre, ref_dec, ref_pre = [], [], [], []
    for r in range(repeats):
        prompt, short = document(n_prefill, seed=r), f"Story {r}: once upon a time"
        pre, dec = isolated(_ours_single, path, prompt, short, n_decode)
        ours_pre.append(pre)
        ours_dec.append(dec)
        pre, dec = isolated(_reference_single, path, prompt, short, n_decode)
        ref_pre.append(pre)
        ref_dec.append(dec)
    med = statistics.median
    return {"ours_decode": med(ours_dec), "ref_decode": med(ref_dec), "ours_prefill": med(ours_pre),
            "ref_prefill": med(ref_pre)}


def concurrency(path: Path, repeats: int, n_decode: int, n_streams: int = 4) -> dict[str, float]:
    """Aggregate decode tokens/s of n concurrent streams vs one stream."""
    def run(engine: Engine, n: int, r: int) -> float:
        streams = [engine.submit(Request(prompt=f"Run {r}, story {i}: the", sampling=_greedy(n_decode)))
                   for i in range(n)]
        first: list[float] = []
        for s in streams:
            for event in s:
                if isinstance(event, TextDelta):
                    first.append(time.perf_counter())
                    break
        results = [s.result() for s in streams]
        end = time.perf_counter()
        return sum(res.stats.completion_tokens - 1 for res in results) / (end - min(first))

    with _engine(path, n_ctx=4096) as engine:
        one = statistics.median(run(engine, 1, r) for r in range(repeats))
        many = statistics.median(run(engine, n_streams, r) for r in range(repeats))
    return {"one": one, "many": many, "n": n_streams}


def latency_beside_prefill(path: Path, doc_tokens: int, turn_tokens: int, n_batch: int,
                           step_budget: int) -> dict[str, float]:
    """Inter-token latency of a user chatting while a long document is read beside the chat.

    The user's chat is a series of `turn_tokens`-token answers (a real chat's context stays short):
    the wizard's mixed workload with one chat (see tune/placements.py).
    """
    from .tune.placements import mixed_workload

    with _engine(path, n_ctx=8192 + 4096, n_batch=n_batch, step_budget=step_budget) as engine:
        r = mixed_workload(engine, "single", doc_tokens, turn_tokens, n_chats=1)
    return {"idle_p50": r.idle_p50, "p50": r.busy_p50, "p99": r.busy_p99, "max": max(r.busy_gaps_ms),
            "doc_s": r.doc_ttft_ms / 1000}


def follow_up_ttft(path: Path, doc_tokens: int, repeats: int) -> dict[str, float]:
    """TTFT of a follow-up question on an already-read document vs the first turn."""
    firsts, follows = [], []
    with _engine(path, n_ctx=8192) as engine:
        for r in range(repeats):
            messages = [{"role": "user", "content": document(doc_tokens, seed=100 + r) + "\nWhich dock did record 3 leave?"}]
            first = engine.submit(Request(messages=messages, sampling=_greedy(16))).result()
            messages += [{"role": "assistant", "content": first.text},
                         {"role": "user", "content": "And record 4?"}]
            follow = engine.submit(Request(messages=messages, sampling=_greedy(16))).result()
            firsts.append(first.stats.ttft_ms)
            follows.append(follow.stats.ttft_ms)
            prompt_tokens = first.stats.prompt_tokens
    return {"first_ms": statistics.median(firsts), "follow_ms": statistics.median(follows),
            "prompt_tokens": prompt_tokens}


def llama_bench(bin_dir: Path, model: Path, repeats: int) -> tuple[float, float]:
    """llama.cpp's own llama-bench on the same file and threads: (decode, prefill-512) tokens/s."""
    import json
    import subprocess

    out = subprocess.run([str(bin_dir / "llama-bench"), "-m", str(model), "-t", str(THREADS), "-p", "512",
                          "-n", "128", "-r", str(repeats), "-fa", "1", "-o", "json"],
                         capture_output=True, text=True, timeout=900).stdout
    rows = json.loads(out)
    decode = next(r["avg_ts"] for r in rows if r["n_gen"] > 0)
    prefill = next(r["avg_ts"] for r in rows if r["n_prompt"] > 0)
    return decode, prefill


def machine_facts() -> str:
    import llama_cpp

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        import psutil

        ram = f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM"
    except ImportError:
        ram = "RAM unknown"
    return (f"{cpu}, {os.cpu_count()} logical cores, {ram}, {THREADS} threads; Python {platform.python_version()}, "
            f"llama-cpp-python {llama_cpp.__version__}")


class Report:
    """Benchmark lines: printed as they come, kept for the Markdown file, headed by the machine."""

    def __init__(self) -> None:
        self.lines = [f"Machine: {machine_facts()}", ""]

    def emit(self, line: str = "") -> None:
        print(line, flush=True)
        self.lines.append(line)

    def save(self, path: str | None) -> None:
        if path:
            Path(path).write_text("\n".join(self.lines) + "\n", encoding="utf-8")


def run_runtime_benchmark(quick: bool = False, output: str | None = None) -> int:
    from .models.catalog import resolve_model
    from .models.derive import requantize

    repeats = 3 if quick else 5
    q4 = resolve_model("smollm2-135m")
    files = {"Q4_1": q4, "Q8_0": requantize(q4, "Q8_0")}
    report = Report()
    emit = report.emit
    native = os.environ.get("LLAMA_CPP_BIN")
    emit(f"### Single stream, ours vs llama-cpp-python `Llama` (medians of {repeats})")
    emit("")
    emit("| file | decode ours | decode Llama | ratio | prefill ours | prefill Llama | ratio |"
         + (" llama-bench decode / prefill-512 |" if native else ""))
    emit("|---|---|---|---|---|---|---|" + ("---|" if native else ""))
    for quant, path in files.items():
        s = single_stream(path, repeats, n_decode=64 if quick else 128, n_prefill=512)
        row = (f"| {quant} | {s['ours_decode']:.1f} tok/s | {s['ref_decode']:.1f} tok/s | "
               f"{s['ours_decode'] / s['ref_decode']:.3f}x | {s['ours_prefill']:.0f} tok/s | "
               f"{s['ref_prefill']:.0f} tok/s | {s['ours_prefill'] / s['ref_prefill']:.3f}x |")
        if native:
            decode, prefill = llama_bench(Path(native), path, repeats)
            row += f" {decode:.1f} / {prefill:.0f} tok/s |"
        emit(row)
    emit("")
    c = isolated(concurrency, q4, repeats, 64 if quick else 128)
    emit(f"### Aggregate decode, Q4_1: {c['n']} concurrent streams vs 1 (medians of {repeats})")
    emit("")
    emit(f"1 stream {c['one']:.1f} tok/s; {c['n']} streams {c['many']:.1f} tok/s in all: **{c['many'] / c['one']:.2f}x**")
    emit("")
    doc_tokens = 2000 if quick else 6000
    lat = {label: isolated(latency_beside_prefill, q4, doc_tokens, 120 if quick else 200, n_batch, budget)
           for label, n_batch, budget in (("chunked (adaptive)", 512, 0), ("one-shot", 8192, 8192))}
    emit(f"### Inter-token latency of a streaming chat while a ~{doc_tokens}-token document is prefilled, Q4_1")
    emit("")
    emit("| prefill | idle p50 | busy p50 | busy p99 | busy max | p99 / idle | document prefill |")
    emit("|---|---|---|---|---|---|---|")
    for label, m in lat.items():
        emit(f"| {label} | {m['idle_p50']:.1f} ms | {m['p50']:.1f} ms | {m['p99']:.1f} ms | {m['max']:.0f} ms | "
             f"{m['p99'] / m['idle_p50']:.2f}x | {m['doc_s']:.2f} s |")
    emit("")
    f = isolated(follow_up_ttft, q4, 2000 if quick else 4000, repeats)
    emit(f"### Follow-up TTFT on an already-read document ({f['prompt_tokens']} tokens), Q4_1")
    emit("")
    emit(f"first turn {f['first_ms']:.0f} ms, follow-up {f['follow_ms']:.0f} ms: **{f['follow_ms'] / f['first_ms'] * 100:.1f}%**")
    report.save(output)
    return 0


if __name__ == "__main__":
    sys.exit(run_runtime_benchmark(quick="--quick" in sys.argv))
