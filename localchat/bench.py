"""`localchat bench`: the runtime benchmark, ours and llama-cpp-python's `Llama` side by side.

Numbers, not assertions: medians over repeats, ratios measured in one run, the machine's facts.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

from .bench_report import Report, isolated
from .runtime.engine import Engine, EngineConfig, Request
from .runtime.events import TextDelta
from .runtime.workers.worker import WorkerConfig, default_threads
from .units import rate_text
from .workloads import document, greedy, mixed_workload

THREADS = default_threads()
# Layers offloaded to the GPU, for scripts/gpu-bench.sh: every side of a comparison offloads alike.
GPU_LAYERS = int(os.environ.get("LOCALCHAT_BENCH_GPU_LAYERS", "0"))


def _engine(path: Path, n_ctx: int = 8192, n_batch: int = 512, step_budget: int = 0,
            adapt_threads: bool = True, threads: int = THREADS) -> Engine:
    worker = WorkerConfig(n_ctx=n_ctx, n_batch=n_batch, n_seq_max=8, n_threads=threads, n_gpu_layers=GPU_LAYERS)
    return Engine.load(path, EngineConfig(worker=worker, step_budget=step_budget, adapt_threads=adapt_threads))


def _ours_single(path: Path, n_prefill: int, n_decode: int, seed: int) -> tuple[float, float]:
    """Our engine: prefill tokens/s of a ~n_prefill-token prompt, decode tokens/s of n_decode tokens."""
    with _engine(path, n_ctx=4096) as engine:
        engine.submit(Request(prompt="Warm up.", sampling=greedy(4))).result()
        pre = engine.submit(Request(prompt=document(n_prefill, seed), sampling=greedy(1))).result().stats
        dec = engine.submit(Request(prompt=f"Story {seed}: once upon a time", sampling=greedy(n_decode))).result().stats
    return pre.prefill_tokens_per_s, dec.tokens_per_s


def _reference_single(path: Path, n_prefill: int, n_decode: int, seed: int) -> tuple[float, float]:
    """llama-cpp-python's `Llama` on the same file, threads, batch and attention."""
    from llama_cpp import Llama

    from .runtime.backends import kernels

    kernels.activate(False, path)  # the same CPU kernels as ours (the bindings load none themselves)
    reference = Llama(str(path), n_ctx=4096, n_batch=512, n_threads=THREADS, flash_attn=True, verbose=False,
                      n_gpu_layers=GPU_LAYERS)
    reference.eval(reference.tokenize(b"Warm up."))
    reference.reset()
    tokens = reference.tokenize(document(n_prefill, seed).encode())
    t0 = time.perf_counter()
    reference.eval(tokens)
    reference.sample(temp=0.0)
    prefill = len(tokens) / (time.perf_counter() - t0)
    reference.reset()
    reference.eval(reference.tokenize(f"Story {seed}: once upon a time".encode()))
    token = reference.sample(temp=0.0)
    t0 = time.perf_counter()
    for _ in range(n_decode - 1):
        reference.eval([token])
        token = reference.sample(temp=0.0)
    decode = (n_decode - 1) / (time.perf_counter() - t0)
    reference.close()
    return prefill, decode


def single_stream(path: Path, repeats: int, n_decode: int, n_prefill: int) -> dict[str, float]:
    """Decode and prefill tokens/s: ours vs Llama, each run in its own process, alternating."""
    runs = {"ours": [], "ref": []}
    for r in range(repeats):
        runs["ours"].append(isolated(_ours_single, path, n_prefill, n_decode, r))
        runs["ref"].append(isolated(_reference_single, path, n_prefill, n_decode, r))
    med = statistics.median
    return {f"{who}_{what}": med(run[i] for run in runs[who])
            for who in runs for i, what in enumerate(("prefill", "decode"))}


def concurrency(path: Path, repeats: int, n_decode: int, n_streams: int = 4) -> dict[str, float]:
    """Aggregate decode tokens/s of n concurrent streams vs one stream."""
    def run(engine: Engine, n: int, r: int) -> float:
        streams = [engine.submit(Request(prompt=f"Run {r}, story {i}: the", sampling=greedy(n_decode)))
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
    the wizard's mixed workload with one chat (see workloads.py).
    """

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
            first = engine.submit(Request(messages=messages, sampling=greedy(16))).result()
            messages += [{"role": "assistant", "content": first.text},
                         {"role": "user", "content": "And record 4?"}]
            follow = engine.submit(Request(messages=messages, sampling=greedy(16))).result()
            firsts.append(first.stats.ttft_ms)
            follows.append(follow.stats.ttft_ms)
            prompt_tokens = first.stats.prompt_tokens
    return {"first_ms": statistics.median(firsts), "follow_ms": statistics.median(follows),
            "prompt_tokens": prompt_tokens}


def llama_bench(bin_dir: Path, model: Path, repeats: int) -> tuple[float, float]:
    """llama.cpp's own llama-bench on the same file and threads: (prefill-512, decode-128) tokens/s.
    A folder made by benchmarks/build-llama-bench.sh for our build holds the wheel's libraries;
    llama-bench then runs the CPU variant our engine runs (its own pick may be one that crashes)."""
    import json
    import shutil
    import subprocess
    import tempfile

    from .runtime.backends import kernels

    with tempfile.TemporaryDirectory(prefix="localchat-llama-bench-") as tmp:
        if any(bin_dir.glob("*ggml-cpu-*")):
            keep = kernels.choose(False, model).module
            shutil.copy2(bin_dir / "llama-bench", tmp)  # ggml looks for variants beside the real executable
            for item in bin_dir.iterdir():
                if item.name != "llama-bench" and ("ggml-cpu-" not in item.name or item.name == keep):
                    (Path(tmp) / item.name).symlink_to(item.resolve())
            bin_dir = Path(tmp)
        env = {**kernels.child_environ(), "LD_LIBRARY_PATH": os.pathsep.join(
            p for p in (str(bin_dir), os.environ.get("LD_LIBRARY_PATH", "")) if p)}  # an empty entry is the cwd
        out = subprocess.run([str(bin_dir / "llama-bench"), "-m", str(model), "-t", str(THREADS), "-p", "512",
                              "-n", "128", "-r", str(repeats), "-fa", "1", "-ngl", str(GPU_LAYERS), "-o", "json"],
                             capture_output=True, text=True, timeout=1800, env=env).stdout
    rows = json.loads(out)
    prefill = next(r["avg_ts"] for r in rows if r["n_prompt"] > 0)
    decode = next(r["avg_ts"] for r in rows if r["n_gen"] > 0)
    return prefill, decode


def _decode_rate(path: Path, threads: int, adapt: bool, n_decode: int) -> tuple[float, int]:
    with _engine(path, n_ctx=2048, adapt_threads=adapt, threads=threads) as engine:
        engine.submit(Request(prompt="Warm up.", sampling=greedy(8))).result()
        result = engine.submit(Request(prompt="Story: once upon a time", sampling=greedy(n_decode))).result()
        tuners = engine.meter.tuners or {}  # the thread tuner of single-token steps, when threads adapt
        return result.stats.tokens_per_s, tuners[1].threads if 1 in tuners else threads


def _spin() -> None:
    """Another program holding a core."""
    while True:
        pass


def busy_core(path: Path, repeats: int, n_decode: int) -> dict[str, tuple[float, int]]:
    """Decode tokens/s idle and with one core taken by another program: fixed thread counts vs adaptive."""
    layouts = {"fixed, all threads": (THREADS, False), "fixed, one thread fewer": (max(1, THREADS - 1), False),
               "adaptive": (THREADS, True)}
    results: dict[str, tuple[float, int]] = {}
    for load in ("idle", "one core busy"):
        hog = multiprocessing.get_context("spawn").Process(target=_spin, daemon=True) if load != "idle" else None
        if hog is not None:
            hog.start()
        try:
            for label, (threads, adapt) in layouts.items():
                runs = [isolated(_decode_rate, path, threads, adapt, n_decode) for _ in range(repeats)]
                results[f"{load}|{label}"] = (statistics.median(r[0] for r in runs), runs[-1][1])
        finally:
            if hog is not None:
                hog.kill()
                hog.join()
    return results


def our_llama_bench() -> Path | None:
    """llama-bench on our build's libraries, where benchmarks/build-llama-bench.sh made it."""
    import llama_cpp

    named = os.environ.get("LLAMA_BENCH_OURS")
    if named:
        return Path(named)
    root = Path(os.environ.get("LOCALCHAT_BUILD_CACHE") or Path(os.environ.get("XDG_CACHE_HOME")
                or Path.home() / ".cache") / "localchat-build")
    run = root / f"llama-bench-{llama_cpp.__version__}-ours" / "run"
    return run if (run / "llama-bench").is_file() else None


def single_stream_table(emit, files: dict[str, Path], repeats: int, quick: bool,
                        bandwidth: float | None = None, where: str = "host copy") -> None:
    """The four runners side by side on each file; `bandwidth` (bytes/s) makes the decode
    roofline, the host's measured copy bandwidth unless given (a GPU's)."""
    from .hardware.bandwidth import measure_host_bandwidth
    from .runtime.backends import kernels

    ours_bench, native = our_llama_bench(), os.environ.get("LLAMA_CPP_BIN")
    bandwidth = bandwidth or measure_host_bandwidth(seconds=1.0) or 0.0
    emit(f"### Single stream: prefill of ~512 tokens and decode of {64 if quick else 128} (medians of {repeats})")
    emit("")
    emit(f"Our CPU kernels: {kernels.describe()}; {where} bandwidth {rate_text(bandwidth)}. "
         "llama-bench (ours) drives our wheel's own libraries; native is llama.cpp built with -march=native and llamafile."
         + ("" if ours_bench else " Run benchmarks/build-llama-bench.sh to add llama-bench."))
    emit("")
    cols = ["ours", "Llama"] + (["llama-bench (ours)"] if ours_bench else []) + (["llama-bench (native)"] if native else [])
    emit("| file | prefill " + " / ".join(cols) + " | ours / best | decode " + " / ".join(cols)
         + " | ours / best | decode % of roofline |")
    emit("|---|---|---|---|---|---|")
    for label, path in files.items():
        s = single_stream(path, repeats, n_decode=64 if quick else 128, n_prefill=512)
        pre, dec = [s["ours_prefill"], s["ref_prefill"]], [s["ours_decode"], s["ref_decode"]]
        for folder in (ours_bench, native):
            if folder:
                p, d = llama_bench(Path(folder), path, repeats)
                pre.append(p)
                dec.append(d)
        roofline = bandwidth / path.stat().st_size if bandwidth else 0.0
        emit(f"| {label} | " + " / ".join(f"{v:.0f}" for v in pre) + f" tok/s | **{pre[0] / max(pre):.2f}** | "
             + " / ".join(f"{v:.1f}" for v in dec) + f" tok/s | **{dec[0] / max(dec):.2f}** | "
             + (f"{100 * dec[0] / roofline:.0f}% of {roofline:.0f} tok/s |" if roofline else "- |"))
    emit("")


def busy_core_table(emit, path: Path, label: str, repeats: int, quick: bool) -> None:
    b = busy_core(path, repeats, 64 if quick else 128)
    emit(f"### Decode with a core taken by another program, {label} (medians of {repeats})")
    emit("")
    emit("| threads | idle | one core busy | threads at the end (busy) |")
    emit("|---|---|---|---|")
    for layout in ("fixed, all threads", "fixed, one thread fewer", "adaptive"):
        idle, busy = b[f"idle|{layout}"], b[f"one core busy|{layout}"]
        emit(f"| {layout} | {idle[0]:.1f} tok/s | {busy[0]:.1f} tok/s | {busy[1]} |")
    best_busy = max(b[f"one core busy|{x}"][0] for x in ("fixed, all threads", "fixed, one thread fewer"))
    best_idle = max(b[f"idle|{x}"][0] for x in ("fixed, all threads", "fixed, one thread fewer"))
    emit("")
    emit(f"Adaptive vs the best fixed count: busy **{b['one core busy|adaptive'][0] / best_busy:.2f}x**, "
         f"idle **{b['idle|adaptive'][0] / best_idle:.2f}x**.")
    emit("")


def run_runtime_benchmark(quick: bool = False, output: str | None = None) -> int:
    from .workloads import bench_files

    repeats = 3 if quick else 5
    files = bench_files(quick)
    q4 = files["SmolLM2-135M Q4_1"]
    report = Report()
    emit = report.emit
    single_stream_table(emit, files, repeats, quick)
    busy_core_table(emit, files["SmolLM2-135M Q4_K_M"], "SmolLM2-135M Q4_K_M", repeats, quick)
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
