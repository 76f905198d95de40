"""What a model's MCP tools cost, on the real engine and real servers: a call's round trip to the server (the
project's fixture server over stdio and over Streamable HTTP, and mcp-server-time), the loop's own cost inside
a Responses request (the call parsed to its result fed back: the mcp_call's arguments done to its completion,
then the result to the next step's first event), and the prompt tokens a server's tool list adds to a request.

    python benchmarks/mcp_tools.py [--repeats N] [--output FILE.md]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from openai import OpenAI

from localchat.bench_report import Report
from localchat.mcp_host.hub import ToolServers
from localchat.mcp_host.servers import ServerSpec
from localchat.runtime.engine import Engine, EngineConfig
from localchat.runtime.workers.worker import WorkerConfig, default_threads

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "tool_servers"))
from api import start_server  # noqa: E402  (the API benchmark's in-process server)
from mcp_fixtures import FIXTURE, free_port, stdio_spec  # noqa: E402

ASK = "Use the echo tool to repeat the word pineapple."


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e3:.1f} ms"


def round_trips(servers: ToolServers, spec: ServerSpec, tool: str, arguments: dict, repeats: int) -> list[float]:
    servers.call(spec, tool, arguments, 60, 20_000)  # started and connected: the cost of a warm server
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        servers.call(spec, tool, arguments, 60, 20_000)
        times.append(time.perf_counter() - t0)
    return times


def loop_costs(client: OpenAI, url: str, repeats: int) -> tuple[list[float], list[float]]:
    """(call parsed -> result back, result back -> the next step's first event), seconds, from the stream."""
    calls, feeds = [], []
    tool = {"type": "mcp", "server_label": "fixture", "server_url": url, "require_approval": "never",
            "allowed_tools": ["echo"]}
    for _ in range(repeats):
        events = [(event.type, time.perf_counter()) for event in client.responses.create(
            model="smollm2-135m", input=ASK, tools=[tool], temperature=0, max_output_tokens=32, stream=True,
            parallel_tool_calls=False,
            tool_choice={"type": "mcp", "server_label": "fixture", "name": "echo"})]
        kinds = [kind for kind, _ in events]
        args_done, completed = kinds.index("response.mcp_call_arguments.done"), kinds.index("response.mcp_call.completed")
        after = next(j for j in range(completed + 1, len(events)) if kinds[j] != "response.output_item.done")
        calls.append(events[completed][1] - events[args_done][1])
        feeds.append(events[after][1] - events[completed][1])
    return calls, feeds


def list_tokens(client: OpenAI, url: str, tools: list[str] | None) -> int:
    """The prompt tokens a server's tool list (all of it, or `tools`) adds to a request."""
    def prompt(extra: list) -> int:  # tool_choice auto: the tools are shown to the model
        return client.responses.create(model="smollm2-135m", input=ASK, max_output_tokens=1,
                                       tools=extra).usage.input_tokens
    tool = {"type": "mcp", "server_label": "fixture", "server_url": url, "require_approval": "never"}
    return prompt([{**tool, **({"allowed_tools": tools} if tools else {})}]) - prompt([])


def main() -> int:
    from localchat.mcp_host import limits
    from localchat.models.resolve import resolve_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--output")
    args = parser.parse_args()
    limits.LIMITS.steps = 2
    port = free_port()
    http = subprocess.Popen([sys.executable, str(FIXTURE), "--http", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    servers = ToolServers()
    report = Report()
    try:
        web = ServerSpec(name="web", url=f"http://127.0.0.1:{port}/mcp")
        deadline = time.monotonic() + 60
        while True:
            try:
                servers.tools(web)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        clock = ServerSpec(name="time", command=sys.executable, args=("-m", "mcp_server_time"))
        rows = {"fixture echo, stdio": round_trips(servers, stdio_spec(), "echo", {"text": "x"}, args.repeats),
                "fixture echo, Streamable HTTP": round_trips(servers, web, "echo", {"text": "x"}, args.repeats),
                "mcp-server-time get_current_time, stdio": round_trips(
                    servers, clock, "get_current_time", {"timezone": "UTC"}, args.repeats)}
        threads = default_threads()
        with Engine.load(resolve_model("smollm2-135m"), EngineConfig(worker=WorkerConfig(n_ctx=4096,
                                                                                        n_threads=threads))) as engine:
            url, server = start_server(engine)
            client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
            calls, feeds = loop_costs(client, web.url, max(3, args.repeats // 4))
            tokens = {"1 tool (echo)": list_tokens(client, web.url, ["echo"]),
                      "the fixture's 9 tools": list_tokens(client, web.url, None)}
            server.should_exit = True
        report.emit(f"### MCP tools: what a call and a tool list cost (SmolLM2-135M Q4_1, {threads} threads; "
                    f"medians)")
        report.emit()
        report.emit("| what | median |")
        report.emit("|---|---|")
        for name, times in rows.items():
            report.emit(f"| a call's round trip: {name} (warm, {len(times)} calls) | {_ms(times)} |")
        report.emit(f"| the loop: arguments done -> result back (Streamable HTTP, {len(calls)} responses) | "
                    f"{_ms(calls)} |")
        report.emit(f"| the loop: result back -> the next step's first event (its prompt read) | {_ms(feeds)} |")
        for name, count in tokens.items():
            report.emit(f"| prompt tokens a tool list adds: {name} | {count} |")
        report.save(args.output)
    finally:
        servers.close()
        http.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
