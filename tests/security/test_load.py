"""A bounded load: streaming clients that leave at random leave no sequence, no growth, a server that answers."""

from __future__ import annotations

import gc
import json
import os
import random
import threading

import httpx
import psutil

from conftest import MODEL, idle, wait_until

CLIENTS, REQUESTS = 8, 25


def client(api: str, seed: int, requests: int, failures: list[str]) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=api, timeout=120) as http:
        for n in range(requests):
            body = {"model": MODEL, "stream": True, "max_tokens": 8, "temperature": 0.7, "seed": n,
                    "messages": [{"role": "user", "content": f"Client {seed} asks question {n}: name a color."}]}
            leave_after = rng.choice([None, None, 0, 1, 3])  # chunks read before hanging up; None: all
            try:
                with http.stream("POST", "/v1/chat/completions", json=body) as response:
                    if response.status_code != 200:
                        failures.append(f"{response.status_code} {response.read()[:200]!r}")
                        continue
                    for count, line in enumerate(response.iter_lines()):
                        if leave_after is not None and count >= leave_after:
                            break  # the client goes away mid-answer
                        if line.startswith("data: {") and '"error"' in line:
                            failures.append(line)
            except httpx.HTTPError as exc:
                failures.append(repr(exc))


def run_round(api: str, base_seed: int, requests: int) -> list[str]:
    failures: list[str] = []
    threads = [threading.Thread(target=client, args=(api, base_seed + i, requests, failures))
               for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failures


def test_streaming_clients_that_leave_at_random(api: str, engine):
    process = psutil.Process(os.getpid())
    assert run_round(api, 1000, 5) == []  # a warm-up round: caches, thread pools and arenas settle
    wait_until(lambda: idle(engine), what="the engine going idle after the warm-up")
    gc.collect()
    before = process.memory_info().rss
    failures = run_round(api, 2000, REQUESTS)
    assert failures == [], failures[:5]
    wait_until(lambda: idle(engine), what="every sequence leaving the engine")
    gc.collect()
    after = process.memory_info().rss
    assert after < before * 1.05, f"RSS grew {after / before - 1:.1%} ({before >> 20} -> {after >> 20} MiB)"
    r = httpx.post(api + "/v1/chat/completions", timeout=60, json={
        "model": MODEL, "max_tokens": 4, "temperature": 0, "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 200 and json.loads(r.text)["choices"][0]["message"]["role"] == "assistant"
