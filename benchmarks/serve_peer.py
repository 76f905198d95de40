"""Documents side by side with llama.cpp's own server: the same GGUF served by `localchat serve` and by
`llama-server` (built from the vendored llama.cpp: `bash benchmarks/build-llama-bench.sh server`), the
same requests through the official `openai` client, greedy, medians of repeats, in one run: each repeat asks
both servers about the same documents, the servers taking turns (ABBA).

    python benchmarks/serve_peer.py MODEL.gguf [--server DIR] [--repeats 3] [--doc-tokens 5000] [--output FILE.md]
    python benchmarks/serve_peer.py MODEL.gguf --server DIR --workload fresh [--doc-tokens 2600] [--busy-cores 1]

Rows: a document and its question (TTFT); the same document sent while another chat streams (its TTFT,
the document's pace, and the chat's inter-token gaps); a follow-up on the same document; a document
"attached then asked" (sent once with max_tokens 1, then the question after its read time); the same
document after a server restart. Each repeat uses documents of its own, so nothing is cached across
repeats except where a row is about the cache.

`--workload fresh`: a fresh long prompt, no reuse. Both servers run at once and take turns request by
request (ABBA): each long prompt (about 3,070 tokens with SmolLM2 at the default --doc-tokens 3000) starts with a nonce of its own, so
nothing of it is cached anywhere, then a short chat streams 64 tokens (its decode speed). `--busy-cores N`
keeps N cores busy with another program throughout; the load average is read before every request.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from openai import OpenAI

from localchat.bench import _spin as spin
from localchat.bench_report import Report
from localchat.workloads import document

sys.path.insert(0, str(Path(__file__).parent))
from api import stream_timing  # noqa: E402  (this script's own folder)

THREADS = 2
QUESTION = "Which dock did shipment 370 leave from? Answer with the number."
MODEL = ["?"]  # the served model id of the server running now
SECONDS = ("doc_ttft", "busy_doc_ttft", "follow_up", "attached", "restart")  # rows timed in seconds
CHAT = [{"role": "user", "content": "Tell me a long story about a lighthouse keeper and the sea."}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(slots=True)
class Server:
    """One server process on a loopback port; `command(port)` starts it."""

    name: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None  # where it starts (a localchat checkout's root runs that checkout)
    process: subprocess.Popen | None = None
    port: int = 0
    model: str = "?"  # the id it serves its file under

    def start(self) -> OpenAI:
        self.port = free_port()
        argv = [a.replace("{port}", str(self.port)) for a in self.command]
        self.process = subprocess.Popen(argv, env=os.environ | self.env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, cwd=self.cwd)
        client = OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="none", max_retries=0, timeout=600)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"{self.name} exited with {self.process.returncode}: {' '.join(argv)}")
            try:
                self.model = MODEL[0] = client.models.list().data[0].id  # the name each server serves its file under
                complete(client, [{"role": "user", "content": "Hi"}], 2)  # loaded and answering
                return client
            except Exception:
                time.sleep(0.5)
        raise SystemExit(f"{self.name} did not start in 300 s")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=60)
            self.process = None


def complete(client: OpenAI, messages: list[dict], max_tokens: int) -> None:
    client.chat.completions.create(model=MODEL[0], messages=messages, max_tokens=max_tokens, temperature=0.0)


def stream(client: OpenAI, messages: list[dict], max_tokens: int, gaps: list[float] | None = None) -> float:
    """Seconds to the first content token; `gaps` gets the inter-token gaps (ms) after it."""
    t0 = time.perf_counter()
    first = last = 0.0
    for chunk in client.chat.completions.create(model=MODEL[0], messages=messages, max_tokens=max_tokens,
                                                temperature=0.0, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            now = time.perf_counter()
            if first and gaps is not None:
                gaps.append((now - last) * 1000)
            first = first or now
            last = now
    return (first or time.perf_counter()) - t0


def ask(doc: str) -> list[dict]:
    return [{"role": "user", "content": f"{doc}\n\n{QUESTION}"}]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def measure(server: Server, doc_tokens: int, seed: int, rows: dict[str, list[float]]) -> None:
    """One repeat of every row on one server, its numbers added to `rows`."""
    client = server.start()

    def take(key: str, value: float) -> None:
        """Keep a number, and print it at once: a long run shows what it has measured so far."""
        rows.setdefault(key, []).append(value)
        print(f"  {server.name}, repeat {len(rows[key])}: {key} = {value:.3f}", file=sys.stderr, flush=True)

    try:
        doc = document(doc_tokens, seed)
        take("doc_ttft", stream(client, ask(doc), 8))
        take("follow_up", stream(client, ask(doc)[:1] + [
            {"role": "assistant", "content": "Dock 6."},
            {"role": "user", "content": "And shipment 407?"}], 8))
        idle: list[float] = []
        stream(client, CHAT, 64, idle)
        take("idle_p50", statistics.median(idle))
        busy: list[float] = []
        chat = threading.Thread(target=stream, args=(client, CHAT, 400, busy))
        chat.start()
        time.sleep(1.0)  # the chat is streaming
        take("busy_doc_ttft", stream(client, ask(document(doc_tokens, seed + 1)), 8))
        chat.join()
        take("busy_p99", percentile(busy, 0.99))
        take("busy_max", max(busy))
        warm = document(doc_tokens, seed + 2)
        t0 = time.perf_counter()
        complete(client, [{"role": "user", "content": warm}], 1)  # how an API client warms a document
        read = time.perf_counter() - t0
        time.sleep(min(read, 5.0))  # the user reads their document's title, then asks
        take("attached", stream(client, [{"role": "user", "content": f"{warm}\n\n{QUESTION}"}], 8))
        restart_doc = document(doc_tokens, seed + 3)
        stream(client, ask(restart_doc), 8)
        server.stop()
        client = server.start()
        take("restart", stream(client, ask(restart_doc), 8))
    finally:
        server.stop()


def fresh(servers: list[Server], doc_tokens: int, repeats: int, busy_cores: int, report: Report) -> None:
    """The fresh-long-prompt workload (see the module's docstring), reported as one table; the last server is the
    one the others are compared with. A request that fails is counted, and the run goes on."""
    import multiprocessing

    hogs = [multiprocessing.get_context("spawn").Process(target=spin, daemon=True) for _ in range(busy_cores)]
    rows: dict[str, dict[str, list[float]]] = {s.name: {"ttft": [], "decode": [], "failed": []} for s in servers}
    loads: list[float] = []
    try:
        clients = [s.start() for s in servers]
        for hog in hogs:
            hog.start()
        for r in range(repeats):
            pairs = list(zip(servers, clients))
            for server, client in pairs if r % 2 == 0 else pairs[::-1]:
                for key, messages, n in (("ttft", ask(f"Request {uuid.uuid4().hex}.\n{document(doc_tokens, r)}"), 8),
                                         ("decode", CHAT, 64)):
                    time.sleep(1.0)  # the other server's threads have gone idle
                    loads.append(os.getloadavg()[0])
                    try:
                        ttft, rate, _ = stream_timing(client, messages, n, server.model)
                    except Exception as exc:  # the server's own words go in the log; the run goes on
                        rows[server.name]["failed"].append(1)
                        print(f"  {server.name}, repeat {r + 1}: {key} failed: {exc}", file=sys.stderr, flush=True)
                        continue
                    rows[server.name][key].append(ttft if key == "ttft" else rate)
                    print(f"  {server.name}, repeat {r + 1}: {key} = {rows[server.name][key][-1]:.3f} "
                          f"(load {loads[-1]:.1f})", file=sys.stderr, flush=True)
    finally:
        for hog in hogs:
            hog.kill()
        for server in servers:
            server.stop()
    names = list(rows)
    report.emit(f"Fresh long prompt: {doc_tokens}-token documents, a nonce of their own each, medians of {repeats}; "
                f"{busy_cores} core(s) kept busy by another program; load average {min(loads):.1f}-{max(loads):.1f} "
                f"(median {statistics.median(loads):.1f}) on {os.cpu_count()} cores")
    report.emit()
    theirs = names[-1]
    report.emit("| row | " + " | ".join(names) + "".join(f" | {n} vs {theirs}" for n in names[:-1]) + " |")
    report.emit("|---|" + "---:|" * (2 * len(names) - 1))

    def median(values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")

    for key, label in (("ttft", "fresh long prompt, TTFT s (each run)"), ("decode", "short chat, decode tok/s")):
        medians = {n: median(rows[n][key]) for n in names}
        cells = [f"{medians[n]:.2f} ({' / '.join(f'{v:.1f}' for v in rows[n][key])})" for n in names]
        ratios = [medians[theirs] / medians[n] if key == "ttft" else medians[n] / medians[theirs] for n in names[:-1]]
        report.emit(f"| {label} | " + " | ".join(cells) + "".join(f" | **{x:.2f}x**" for x in ratios) + " |")
    report.emit("| failed requests | " + " | ".join(str(len(rows[n]["failed"])) for n in names)
                + " |" * len(names))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", type=Path)
    parser.add_argument("--server", type=Path, help="the folder holding llama-server (build-llama-bench.sh server)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--doc-tokens", type=int, help="filler tokens per document (default 5000; fresh: 3000, about 3,070 prompt tokens with SmolLM2)")
    parser.add_argument("--n-ctx", type=int, default=16384)
    parser.add_argument("--output", type=Path)
    parser.add_argument("--workload", choices=("documents", "fresh"), default="documents")
    parser.add_argument("--baseline", type=Path, help="another localchat checkout served beside (fresh)")
    parser.add_argument("--busy-cores", type=int, default=0, help="cores another program keeps busy (fresh)")
    args = parser.parse_args()
    args.doc_tokens = args.doc_tokens or (3000 if args.workload == "fresh" else 5000)
    home = tempfile.mkdtemp(prefix="localchat-peer-")
    ours = Server("localchat serve", [sys.executable, "-m", "localchat", "serve", "--model", str(args.model),
                                      "--port", "{port}", "--n-ctx", str(args.n_ctx), "--threads", str(THREADS)],
                  env={"LOCALCHAT_HOME": home})
    servers = [ours]
    if args.baseline is not None:
        servers.append(Server("localchat serve (baseline)", ours.command, env={"LOCALCHAT_HOME": tempfile.mkdtemp(
            prefix="localchat-peer-"), "PYTHONPATH": str(args.baseline)}, cwd=str(args.baseline)))
    if args.server is not None:
        servers.append(Server("llama-server", [str(args.server / "llama-server"), "-m", str(args.model),
                                               "--port", "{port}", "-c", str(args.n_ctx), "-np", "4",
                                               "--kv-unified", "-fa", "on", "-t", str(THREADS), "--jinja"]))
    if args.workload == "fresh":
        report = Report()
        fresh(servers, args.doc_tokens, args.repeats, args.busy_cores, report)
        report.save(args.output)
        return 0
    # Repeat by repeat, the servers in turn (ABBA: the first of one repeat is the last of the next), on the
    # same documents: a drift of the machine over the run falls on both sides alike.
    results: dict[str, dict[str, list[float]]] = {s.name: {} for s in servers}
    for r in range(args.repeats):
        for server in servers if r % 2 == 0 else servers[::-1]:
            measure(server, args.doc_tokens, 1000 + 10 * r, results[server.name])
    report = Report()
    report.emit(f"Documents beside llama-server: {args.model.name}, ~{args.doc_tokens}-token documents, "
                f"medians of {args.repeats}")
    report.emit()
    labels = {"doc_ttft": "document + question, TTFT s", "busy_doc_ttft": "the same while a chat streams, TTFT s",
              "follow_up": "follow-up on the same document, TTFT s", "attached": "attached then asked, TTFT s",
              "restart": "after a restart, TTFT s", "idle_p50": "chat alone, inter-token p50 ms",
              "busy_p99": "chat beside the read, inter-token p99 ms", "busy_max": "chat beside the read, max gap ms"}
    names = list(results)
    pair = len(names) == 2
    report.emit("| row | " + " | ".join(names) + (" | speed, ours vs theirs |" if pair else " |"))
    report.emit("|---|" + "---:|" * (len(names) + pair))
    for key, label in labels.items():
        medians = [statistics.median(results[n][key]) for n in names]
        seconds = key in SECONDS
        cells = " | ".join(f"{m:.2f}" if seconds else f"{m:.0f}" for m in medians)
        ratio = f" | {medians[1] / medians[0]:.2f}x" if pair and seconds and medians[0] > 0 else (" | " if pair else "")
        report.emit(f"| {label} | {cells}{ratio} |")
    report.save(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
