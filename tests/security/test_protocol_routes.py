"""Every protocol's routes (OpenAI's, Anthropic's, Ollama's) behind the same guards: Host names, cross-site
requests, the key (bearer or x-api-key), body limits and bounded work, each refusal in the route's own
error shape. The routes come from the router's own list, so a route added later is covered too."""

from __future__ import annotations

import json
from typing import Iterator

import httpx
import pytest

from localchat.api.app import create_app
from localchat.api.local import LocalService
from localchat.api.routes import ROUTES
from localchat.api.wire import dialect
from conftest import MODEL, serve_in_thread

KEY = "route-key-81c3"
LIMIT = 64 * 1024 * 1024
STORED = "resp_" + "0" * 24  # a response id of this server's form
POSTS = [r.path for r in ROUTES if r.method == "POST"]
OTHERS = [(r.method, r.path.replace("{model_id:path}", MODEL).replace("{response_id}", STORED))
          for r in ROUTES if r.method != "POST"]
# Each protocol's smallest real request, and where its bounded-work cases put the messages.
BODIES = {"openai": {"model": MODEL, "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 2},
          "anthropic": {"model": MODEL, "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 2},
          "ollama": {"model": MODEL, "messages": [{"role": "user", "content": "Hi."}], "stream": False,
                     "options": {"num_predict": 2}}}


def shaped(path: str, reply: httpx.Response) -> str:
    """The message of an error in the shape `path`'s protocol writes, failing if the shape is not its own."""
    body = reply.json()
    spoken = dialect(path)
    if spoken == "ollama":
        assert set(body) == {"error"} and isinstance(body["error"], str), (path, body)
        return body["error"]
    if spoken == "anthropic":
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, (path, body)
        return body["error"]["message"]
    assert set(body["error"]) >= {"message", "type", "param", "code"}, (path, body)
    return body["error"]["message"]


@pytest.fixture(scope="module")
def keyed(engine) -> Iterator[str]:
    url, server, thread = serve_in_thread(create_app(LocalService(engine, MODEL), api_key=KEY))
    yield url
    server.should_exit = True
    thread.join(10)


def test_every_route_refuses_a_foreign_host_and_a_cross_site_post(api: str, engine):
    before = engine.steps
    for method, path in OTHERS + [("POST", p) for p in POSTS]:
        r = httpx.request(method, api + path, json=BODIES[dialect(path)], timeout=30,
                          headers={"Host": "evil.example:8000"})
        assert r.status_code == 403 and "its own address" in shaped(path, r), (path, r.text[:200])
    # A page's DELETE (which needs a preflight no origin here passes) is refused all the same.
    r = httpx.delete(api + "/v1/responses/" + STORED, timeout=30, headers={"Origin": "https://evil.example"})
    assert r.status_code == 403 and "--cors-origin" in shaped("/v1/responses", r), r.text[:200]
    for path in POSTS:
        # A page's no-cors fetch: text/plain needs no preflight, and the guard answers before the route.
        r = httpx.post(api + path, content=json.dumps(BODIES[dialect(path)]), timeout=30,
                       headers={"Content-Type": "text/plain", "Origin": "https://evil.example",
                                "Sec-Fetch-Site": "cross-site"})
        assert r.status_code == 403 and "--cors-origin" in shaped(path, r), (path, r.text[:200])
        # No Origin, but a browser's own marks: still not JSON, still refused.
        r = httpx.post(api + path, content=json.dumps(BODIES[dialect(path)]), timeout=30,
                       headers={"Content-Type": "text/plain", "Sec-Fetch-Mode": "no-cors"})
        assert r.status_code == 415 and "application/json" in shaped(path, r), (path, r.text[:200])
        assert "access-control-allow-origin" not in r.headers
    assert engine.steps == before  # nothing generated


def test_every_route_needs_the_key_as_a_bearer_token_or_x_api_key(keyed: str):
    for method, path in OTHERS + [("POST", p) for p in POSTS]:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"x-api-key": KEY[:-1]}):
            r = httpx.request(method, keyed + path, json=BODIES[dialect(path)], headers=headers, timeout=30)
            assert r.status_code == 401 and "API key" in shaped(path, r), (path, headers, r.text[:200])
    for headers in ({"Authorization": f"Bearer {KEY}"}, {"x-api-key": KEY}):
        for path in ("/api/tags", "/v1/models"):
            assert httpx.get(keyed + path, headers=headers, timeout=30).status_code == 200, (path, headers)
        r = httpx.post(keyed + "/v1/messages", json=BODIES["anthropic"], headers=headers, timeout=60)
        assert r.status_code == 200 and r.json()["type"] == "message", r.text[:200]


@pytest.mark.parametrize("path", ["/api/chat", "/v1/messages"])
def test_a_chunked_body_over_the_limit_is_refused_while_reading(api: str, path: str):
    def chunks():  # no Content-Length: the size is known only by counting
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(LIMIT // 2**20 + 2):
            yield b"a" * 2**20
        yield b'"}]}'

    try:
        r = httpx.post(api + path, content=chunks(), timeout=120, headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and "limit" in shaped(path, r), (r.status_code, r.text[:200])
    except (httpx.WriteError, httpx.RemoteProtocolError):
        pass  # refused before the client finished sending: just as good
    assert httpx.get(api + "/api/tags", timeout=30).status_code == 200


def test_hostile_bodies_cost_bounded_work_on_every_post_route(api: str):
    depth = 100_000
    for path in POSTS:
        r = httpx.post(api + path, content=b'{"input": ' + b"[" * depth + b"]" * depth + b"}", timeout=60,
                       headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "nests" in shaped(path, r), (path, r.text[:200])
        r = httpx.post(api + path, content=b'{"messages": "a\\ud800b"}', timeout=60,
                       headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "surrogate" in shaped(path, r), (path, r.text[:200])
    many = [{"role": "user", "content": "<|im_start|>system"}] * 100_000  # ~3 MB
    for path in ("/api/chat", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses"):
        body = {**BODIES[dialect(path)], "messages": many}
        if path == "/v1/responses":
            body = {"model": MODEL, "input": many}
        r = httpx.post(api + path, json=body, timeout=120)
        assert r.status_code == 400 and "messages" in shaped(path, r), (path, r.text[:200])
    r = httpx.post(api + "/api/generate", json={"model": MODEL, "prompt": "a " * 2**20, "stream": False}, timeout=120)
    assert r.status_code == 400 and "characters" in shaped("/api/generate", r), r.text[:200]
    assert httpx.get(api + "/api/tags", timeout=30).status_code == 200


@pytest.mark.parametrize("kind", ["5,000-digit integer", "900 levels deep"])
def test_a_huge_integer_or_a_deep_value_in_a_body_is_a_400_on_every_route(api: str, engine, kind: str):
    """Python reads neither (a ValueError that is no JSONDecodeError; a value that parses a little under
    the recursion limit and fails where it is validated or written out): each was a 500 on every route."""
    hostile = b"9" * 5000 if kind.startswith("5") else b"[" * 900 + b"]" * 900
    before = engine.steps
    for path in POSTS:
        body = json.dumps({**BODIES[dialect(path)], "temperature": "@@"}).encode().replace(b'"@@"', hostile)
        r = httpx.post(api + path, content=body, headers={"Content-Type": "application/json"}, timeout=60)
        said = shaped(path, r)
        assert r.status_code == 400, (path, r.status_code, said)
        assert ("4,300 digits" if kind.startswith("5") else "nests deeper than 128 levels") in said, (path, said)
    assert engine.steps == before
