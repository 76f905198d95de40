"""No web page drives the server: foreign Host names (DNS rebinding), cross-site POSTs, CORS off by default."""

from __future__ import annotations

import json

import httpx
import pytest

from localchat.api.app import ServeOptions, create_app
from localchat.api.local import LocalService
from conftest import MODEL, serve_in_thread

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 2, "temperature": 0}


def test_a_foreign_host_name_is_refused(api: str):
    # DNS rebinding: evil.example resolves to 127.0.0.1, the browser sends its own name.
    for path in ("/v1/models", "/v1/chat/completions", "/v1/embeddings"):
        r = httpx.request("GET" if path.endswith("models") else "POST", api + path, json=CHAT,
                          headers={"Host": "evil.example:8000"}, timeout=30)
        assert r.status_code == 403, (path, r.status_code, r.text[:200])
        assert r.json()["error"]["code"] == "host_not_allowed"
    assert httpx.get(api + "/v1/models", timeout=30).status_code == 200  # its own address still works
    port = api.rsplit(":", 1)[1]
    assert httpx.get(api + "/v1/models", headers={"Host": f"localhost:{port}"}, timeout=30).status_code == 200


def test_a_foreign_host_name_is_refused_by_the_window(window):
    r = httpx.get(window.url + "/", headers={"Host": "attacker.test"}, timeout=30)
    assert r.status_code == 403
    assert httpx.get(window.url + "/", timeout=30).status_code == 200


def test_a_cross_site_text_plain_post_starts_nothing(api: str, engine):
    # What a page's `fetch(url, {method: "POST", mode: "no-cors", body})` sends: no preflight needed.
    before = engine.steps
    r = httpx.post(api + "/v1/chat/completions", content=json.dumps(CHAT),
                   headers={"Content-Type": "text/plain;charset=UTF-8", "Origin": "https://evil.example",
                            "Sec-Fetch-Site": "cross-site"}, timeout=30)
    assert r.status_code == 403 and r.json()["error"]["code"] == "cross_site_request"
    # Even with no Origin at all (an old browser, a stripped header): text/plain is not JSON.
    r = httpx.post(api + "/v1/chat/completions", content=json.dumps(CHAT),
                   headers={"Content-Type": "text/plain"}, timeout=30)
    assert r.status_code == 415 and "application/json" in r.json()["error"]["message"]
    assert engine.steps == before  # no generation ran
    assert "access-control-allow-origin" not in r.headers  # CORS is off by default


def test_a_cross_site_embeddings_post_is_refused(api: str):
    body = json.dumps({"input": "planted"})
    r = httpx.post(api + "/v1/embeddings", content=body, timeout=30,
                   headers={"Content-Type": "text/plain", "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "cross_site_request"
    r = httpx.post(api + "/v1/embeddings", content=body, headers={"Content-Type": "text/plain"}, timeout=30)
    assert r.status_code == 415


def test_a_cross_origin_upload_to_the_window_is_refused(window):
    files = {"files": ("planted.txt", b"planted by another site", "text/plain")}
    r = httpx.post(window.url + "/gradio_api/upload", files=files, timeout=30,
                   headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403, r.text[:200]
    same = httpx.post(window.url + "/gradio_api/upload", files=files, timeout=30,
                      headers={"Origin": window.url, "Sec-Fetch-Site": "same-origin"})
    assert same.status_code == 200  # the window's own page still uploads


def test_cors_allows_only_a_named_origin(engine):
    options = ServeOptions(cors_origins=("http://localhost:3000",))
    url, server, thread = serve_in_thread(create_app(LocalService(engine, MODEL), policy=options.policy(None)))
    try:
        preflight = {"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": "content-type"}
        r = httpx.options(url + "/v1/chat/completions", headers=preflight, timeout=30)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000"
        r = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=60,
                       headers={"Origin": "http://localhost:3000", "Sec-Fetch-Site": "same-site"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000"
        other = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=30,
                           headers={"Origin": "http://localhost:4000", "Sec-Fetch-Site": "same-site"})
        assert other.status_code == 403
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.mark.parametrize("origin", ["*", "localhost:3000", "http://localhost:3000/app"])
def test_a_cors_origin_must_be_an_origin(origin: str):
    from localchat.errors import ConfigError

    with pytest.raises(ConfigError, match="not an origin"):
        ServeOptions(cors_origins=(origin,)).policy(8000)


def cors_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.lower().startswith("access-control-")}


def test_the_window_answers_no_other_origin_with_cors(window):
    # Another program's page on this machine: the window's framework would allow any localhost origin,
    # with credentials, so that page could read the window's config and what its GET routes return.
    other = {"Origin": "http://localhost:9999"}
    for path in ("/config", "/", "/gradio_api/info", "/v1/models"):
        r = httpx.get(window.url + path, headers=other, timeout=30)
        assert r.status_code == 200 and not cors_headers(r), (path, cors_headers(r))
    preflight = httpx.options(window.url + "/gradio_api/upload", timeout=30,
                              headers={**other, "Access-Control-Request-Method": "POST"})
    assert not cors_headers(preflight), cors_headers(preflight)


def test_the_window_config_names_no_model_file(window, model_path):
    # The model picker is filled when the page loads (same origin only), not in the config any GET returns.
    for path in ("/config", "/"):
        text = httpx.get(window.url + path, timeout=30).text
        assert str(model_path.parent) not in text and model_path.name not in text, path
