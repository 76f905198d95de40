"""Runner benchmark: what the model runner process costs (localchat/runners/). The same model, the same
requests, once on an engine in this process and once through a supervised runner (as `localchat`
and `localchat serve` run it), alternately; TTFT and decode tokens/s as the caller sees them, medians.

    python benchmarks/runner.py [--quick] [--output FILE.md]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time

from localchat.assemble import open_engine
from localchat.bench_report import Report
from localchat.config import Settings
from localchat.runners.supervisor import SupervisedEngine
from localchat.runtime.engine import Request
from localchat.runtime.events import TextDelta
from localchat.runtime.workers.worker import default_threads
from localchat.workloads import greedy


def timing(engine, prompt: str, max_tokens: int) -> tuple[float, float]:
    """(TTFT seconds, decode tokens/s after the first token) of one greedy answer of exactly max_tokens."""
    t0 = time.perf_counter()
    first = last = 0.0
    tokens = 0
    stream = engine.submit(Request(messages=[{"role": "user", "content": prompt}], sampling=greedy(max_tokens)))
    for event in stream:
        if isinstance(event, TextDelta):
            last = time.perf_counter()
            first = first or last
        elif event.kind == "stats":
            tokens = event.completion_tokens
    return first - t0, (tokens - 1) / (last - first) if tokens > 1 and last > first else 0.0


def main() -> int:
    from localchat.models.resolve import resolve_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output")
    args = parser.parse_args()
    repeats, n = (4, 64) if args.quick else (12, 256)
    settings = Settings(model=str(resolve_model("smollm2-135m")), n_ctx=4096, n_threads=default_threads(),
                        speculation=False, kv_disk_mb=0)
    report = Report()
    emit = report.emit
    sides = {"in process": open_engine(settings),
             "runner": SupervisedEngine(functools.partial(open_engine, settings))}
    found: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in sides}
    try:
        for name, engine in sides.items():  # a first answer each, unmeasured: caches warm
            timing(engine, "Warm up.", 8)
        for r in range(repeats):
            # Each round is a pair, its order alternating (ABBA): a ratio within a pair is measured under
            # the same load, and the median of the pairs' ratios is what other programs disturb least.
            order = list(sides.items()) if r % 2 == 0 else list(sides.items())[::-1]
            for name, engine in order:
                ttft, rate = timing(engine, f"Story {r}: write about a lighthouse keeper.", n)
                found[name][0].append(ttft)
                found[name][1].append(rate)
                emit(f"- round {r + 1}, {name}: TTFT {ttft * 1000:.1f} ms, {rate:.1f} tok/s")
    finally:
        for engine in sides.values():
            engine.close()
    (ttft_in, rate_in), (ttft_out, rate_out) = ((statistics.median(t), statistics.median(v))
                                                 for t, v in found.values())
    (ttfts_in, rates_in), (ttfts_out, rates_out) = found.values()
    pair_ratio = statistics.median(b / a for a, b in zip(rates_in, rates_out) if a > 0)
    pair_extra = statistics.median(b - a for a, b in zip(ttfts_in, ttfts_out))
    emit("")
    emit(f"### The model runner process vs an engine in process, SmolLM2-135M Q4_1 (medians of {repeats}, "
         f"{n} tokens each)")
    emit("")
    best_in, best_out = (max(v) for _, v in found.values())  # the rounds least disturbed by other programs
    emit("| | in process | runner | runner / in process |")
    emit("|---|---|---|---|")
    emit(f"| decode tok/s | {rate_in:.1f} | {rate_out:.1f} | {rate_out / rate_in:.3f}× |")
    emit(f"| decode tok/s, best round | {best_in:.1f} | {best_out:.1f} | {best_out / best_in:.3f}× |")
    emit(f"| decode, median of the rounds' ratios | | | **{pair_ratio:.3f}×** |")
    emit(f"| TTFT ms | {ttft_in * 1000:.1f} | {ttft_out * 1000:.1f} | {(ttft_out - ttft_in) * 1000:+.1f} ms |")
    emit(f"| TTFT, median of the rounds' differences | | | **{pair_extra * 1000:+.1f} ms** |")
    report.save(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
