"""Tool-call benchmark through the OpenAI-compatible API: time to the first tool-call delta and to the
whole call (tool_choice required, under the tool's grammar) beside time to the first content token of
a plain answer to the same messages and tools (tool_choice none), side by side, medians over repeats.

    python benchmarks/tool_calls.py [--repeats N] [--output FILE.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from openai import OpenAI

from localchat.bench_report import Report
from localchat.runtime.engine import Engine, EngineConfig
from localchat.runtime.workers.worker import WorkerConfig, default_threads

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from api import start_server  # noqa: E402  (the API benchmark's in-process server)

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather forecast for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"]}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris tomorrow?"}]


def timing(client: OpenAI, choice: str) -> tuple[float, float]:
    """(seconds to the first delta that carries content or a call, seconds to the end)."""
    t0 = time.perf_counter()
    first = 0.0
    for chunk in client.chat.completions.create(model="smollm2-135m", messages=ASK, tools=TOOLS, tool_choice=choice,
                                                parallel_tool_calls=False, temperature=0, max_tokens=48,
                                                stream=True):
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is not None and (delta.content or delta.tool_calls) and not first:
            first = time.perf_counter() - t0
    return first, time.perf_counter() - t0


def main() -> int:
    from localchat.models.resolve import resolve_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output")
    args = parser.parse_args()
    threads = default_threads()
    config = EngineConfig(worker=WorkerConfig(n_ctx=2048, n_threads=threads))
    with Engine.load(resolve_model("smollm2-135m"), config) as engine:
        url, server = start_server(engine)
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
        timing(client, "required")  # warm: the prompt's KV is then reused by every run alike
        runs: dict[str, list[tuple[float, float]]] = {"required": [], "none": []}
        for _ in range(args.repeats):
            for choice in runs:  # alternately, so load on the machine falls on both alike
                runs[choice].append(timing(client, choice))
        server.should_exit = True
    med = {c: (statistics.median(r[0] for r in runs[c]) * 1e3, statistics.median(r[1] for r in runs[c]) * 1e3)
           for c in runs}
    report = Report()
    report.emit(f"### Tool calls through the API, SmolLM2-135M Q4_1, {threads} threads "
                f"(medians of {args.repeats}, client-side timing)")
    report.emit()
    report.emit(f"- First tool-call delta (tool_choice required, grammar from the first token): "
                f"{med['required'][0]:.0f} ms; the whole call: {med['required'][1]:.0f} ms.")
    report.emit(f"- First content token of a plain answer (tool_choice none): {med['none'][0]:.0f} ms "
                f"(a required call's first delta takes **{med['required'][0] / med['none'][0]:.2f}x** that).")
    report.save(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
