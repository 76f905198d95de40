"""API benchmark: TTFT of a first and a follow-up question on a ~4k-token document through the
OpenAI-compatible API, and decode tokens/s through the API vs the engine directly.

    python benchmarks/api.py [--quick] [--output FILE.md]

The server runs in this process (uvicorn on a loopback port); the official `openai` client talks
to it. Each side runs alternately, medians over repeats.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time

import uvicorn
from openai import OpenAI

from localchat.api.app import bind_socket, create_app, url_of
from localchat.api.local import LocalService
from localchat.bench_report import Report
from localchat.runtime.engine import Engine, EngineConfig, Request
from localchat.runtime.sampling import SamplingParams
from localchat.runtime.workers.worker import WorkerConfig, default_threads
from localchat.workloads import document


def start_server(engine: Engine) -> tuple[str, uvicorn.Server]:
    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(LocalService(engine, "smollm2-135m")), log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return url_of(sock), server


def stream_timing(client: OpenAI, messages: list[dict[str, str]], max_tokens: int, model: str = "smollm2-135m",
                  streaming: threading.Event | None = None) -> tuple[float, float, str]:
    """(TTFT seconds, decode tokens/s, text) as the client sees them; `streaming` is set at the first token."""
    t0 = time.perf_counter()
    first = last = 0.0
    parts, tokens = [], 0
    for chunk in client.chat.completions.create(model=model, messages=messages, stream=True,
                                                temperature=0.0, max_tokens=max_tokens,
                                                stream_options={"include_usage": True}):
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        if chunk.choices and chunk.choices[0].delta.content:
            last = time.perf_counter()
            first = first or last
            parts.append(chunk.choices[0].delta.content)
            if streaming is not None:
                streaming.set()
    return first - t0, (tokens - 1) / (last - first) if tokens > 1 and last > first else 0.0, "".join(parts)


def main() -> int:
    from localchat.models.resolve import resolve_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output")
    args = parser.parse_args()
    repeats, n = (2, 64) if args.quick else (5, 128)
    model = resolve_model("smollm2-135m")
    worker = WorkerConfig(n_ctx=8192, n_threads=default_threads())
    report = Report()
    emit = report.emit

    with Engine.load(model, EngineConfig(worker=worker)) as engine:
        url, server = start_server(engine)
        client = OpenAI(base_url=f"{url}/v1", api_key="unused")
        firsts, follows = [], []
        for r in range(repeats):
            messages = [{"role": "user", "content": document(4000, seed=200 + r) + "\nWhich dock did record 3 leave?"}]
            ttft, _, text = stream_timing(client, messages, 16)
            firsts.append(ttft)
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "And record 4?"}]
            follows.append(stream_timing(client, messages, 16)[0])
        prompt_tokens = len(engine.prompt_tokens(Request(messages=messages)))
        api_rates, direct_rates = [], []
        for r in range(repeats):
            chat = [{"role": "user", "content": f"Story {r}: write about a lighthouse keeper."}]
            api_rates.append(stream_timing(client, chat, n)[1])
            direct = engine.submit(Request(messages=[{"role": "user", "content": f"Tale {r}: write about a lighthouse keeper."}],
                                           sampling=SamplingParams(temperature=0.0, max_tokens=n))).result()
            direct_rates.append(direct.stats.tokens_per_s)
        server.should_exit = True
    first, follow = statistics.median(firsts), statistics.median(follows)
    api, direct = statistics.median(api_rates), statistics.median(direct_rates)
    emit(f"### Through the OpenAI-compatible API, Q4_1 (medians of {repeats}, client-side timing)")
    emit("")
    emit(f"- TTFT on a {prompt_tokens}-token document: first question {first * 1000:.0f} ms, follow-up "
         f"{follow * 1000:.0f} ms (**{follow / first * 100:.1f}%**): the document's KV is reused.")
    emit(f"- Decode: {api:.1f} tok/s through the API (streaming), {direct:.1f} tok/s from the engine directly: "
         f"API overhead **{(1 - api / direct) * 100:.1f}%**.")
    report.save(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
