"""The MCP client (localchat/mcp_host/) against real servers: the project's fixture server over stdio and
Streamable HTTP, and mcp-server-time from the package index. A server is started when first needed, lists and
calls tools, is bounded (a slow call times out, a huge result is cut with a note), survives its own crash (the
next call starts it again), honours tools/list_changed, answers ten calls at once, and sends its stderr to the
log; the servers file is checked like any input and keeps its secrets out of what is shown."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from mcp_fixtures import stdio_spec

from localchat.errors import ConfigError, ToolServerError
from localchat.mcp_host.hub import ToolServers
from localchat.mcp_host.servers import ServerSpec, parse_servers, read_file, save, servers_file

LIMIT = 20_000


@pytest.fixture()
def servers():
    hub = ToolServers()
    yield hub
    hub.close()


def test_a_stdio_server_lists_and_calls_its_tools(servers: ToolServers):
    spec = stdio_spec()
    names = {t.name for t in servers.tools(spec)}
    assert {"echo", "add", "slow", "crash", "huge", "fail", "image", "grow"} <= names
    assert servers.call(spec, "echo", {"text": "hello"}, 30, LIMIT).text == "echo: hello"
    assert servers.call(spec, "add", {"a": 2, "b": 40}, 30, LIMIT).text == "42"
    failed = servers.call(spec, "fail", {}, 30, LIMIT)
    assert failed.is_error and "failed on purpose" in failed.text
    unknown = servers.call(spec, "no_such_tool", {}, 30, LIMIT)
    assert unknown.is_error
    picture = servers.call(spec, "image", {}, 30, LIMIT)
    assert picture.images and picture.images[0][0] == "image/png" and "[image 1: image/png]" in picture.text


def test_a_huge_result_is_cut_with_a_note(servers: ToolServers):
    outcome = servers.call(stdio_spec(), "huge", {"chars": 50_000}, 30, 1000)
    assert outcome.cut_chars == 49_000 and outcome.text.startswith("x" * 1000)
    assert "49000 more characters cut" in outcome.text and len(outcome.text) < 1200


def test_a_hung_call_ends_at_its_timeout_and_the_server_still_answers(servers: ToolServers):
    spec = stdio_spec()
    began = time.monotonic()
    with pytest.raises(ToolServerError, match="did not answer a call of slow within 2 s"):
        servers.call(spec, "slow", {"seconds": 120}, 2, LIMIT)
    assert time.monotonic() - began < 60
    assert servers.call(spec, "echo", {"text": "after"}, 30, LIMIT).text == "echo: after"


def test_a_crash_mid_call_is_an_error_and_the_next_call_starts_it_again(servers: ToolServers,
                                                                           caplog: pytest.LogCaptureFixture):
    spec = stdio_spec()
    with caplog.at_level(logging.INFO, logger="localchat.mcp_host"):
        with pytest.raises(ToolServerError, match="stopped during a call of crash"):
            servers.call(spec, "crash", {}, 60, LIMIT)
        assert servers.call(spec, "echo", {"text": "again"}, 60, LIMIT).text == "echo: again"
        deadline = time.monotonic() + 30
        while "crashing on purpose" not in caplog.text:  # its stderr, read by a thread of its own
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.05)
    assert "MCP server fixture: fixture: crashing on purpose" in caplog.text


def test_a_server_that_writes_garbage_still_serves(servers: ToolServers):
    spec = stdio_spec("garbled", "--garbage")
    assert servers.call(spec, "echo", {"text": "x"}, 60, LIMIT).text == "echo: x"


def test_a_server_that_cannot_start_is_a_clear_error(servers: ToolServers):
    spec = ServerSpec(name="missing", command="/nonexistent/mcp-server")
    with pytest.raises(ToolServerError, match="'missing' could not be started or reached"):
        servers.tools(spec)
    spec = ServerSpec(name="closed", url="http://127.0.0.1:9/mcp")
    with pytest.raises(ToolServerError, match="'closed' could not be started or reached"):
        servers.tools(spec)


def test_tools_list_changed_is_honoured(servers: ToolServers):
    spec = stdio_spec()
    assert "grown" not in {t.name for t in servers.tools(spec)}
    assert servers.call(spec, "grow", {}, 30, LIMIT).text == "added the tool 'grown'"
    deadline = time.monotonic() + 30
    while "grown" not in {t.name for t in servers.tools(spec)}:
        assert time.monotonic() < deadline, "the new tool never appeared in the listing"
        time.sleep(0.05)
    assert servers.call(spec, "grown", {}, 30, LIMIT).text == "grown here"


def test_ten_calls_at_once_each_get_their_own_answer(servers: ToolServers):
    spec = stdio_spec()
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda i: servers.call(spec, "add", {"a": i, "b": 1000}, 60, LIMIT).text, range(10)))
    assert answers == [str(1000 + i) for i in range(10)]


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_closing_ends_the_server_process(servers: ToolServers):
    def children() -> set[int]:
        return {int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == os.getpid()}

    before = children()
    servers.call(stdio_spec(), "echo", {"text": "x"}, 30, LIMIT)
    started = children() - before
    assert started, "the stdio server runs as a child of this process"
    servers.close()
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in started):
        assert time.monotonic() < deadline, "a server process outlived its connection"
        time.sleep(0.05)


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_streamable_http_with_headers(servers: ToolServers, http_fixture: str):
    spec = ServerSpec(name="web", url=http_fixture, headers={"Authorization": "Bearer sekret"})
    assert "echo" in {t.name for t in servers.tools(spec)}
    assert servers.call(spec, "header", {"name": "authorization"}, 30, LIMIT).text == "Bearer sekret"


def test_an_old_server_over_http_and_sse(servers: ToolServers, sse_fixture: str):
    spec = ServerSpec(name="old", url=sse_fixture, sse=True)
    assert spec.transport == "sse" and "echo" in {t.name for t in servers.tools(spec)}
    assert servers.call(spec, "echo", {"text": "old"}, 30, LIMIT).text == "echo: old"


def test_a_server_from_the_package_index(servers: ToolServers):
    spec = ServerSpec(name="time", command=sys.executable, args=("-m", "mcp_server_time", "--local-timezone=UTC"))
    assert "get_current_time" in {t.name for t in servers.tools(spec)}
    outcome = servers.call(spec, "get_current_time", {"timezone": "Europe/Paris"}, 60, LIMIT)
    assert not outcome.is_error and json.loads(outcome.text)["timezone"] == "Europe/Paris"


def test_the_servers_file_in_the_apps_notation_and_its_secrets_kept_in_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    text = json.dumps({"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "server-filesystem", "/tmp"], "env": {"TOKEN": "s3cret"}},
        "web": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer s3cret"},
                "alwaysAllow": ["search"]},
        "old": {"url": "http://localhost:8931/sse", "type": "sse", "disabled": True}}, "other": {"kept": 1}})
    files, web, old = parse_servers(text, "mcp.json")
    assert files.transport == "stdio" and web.transport == "http" and old.transport == "sse" and old.disabled
    assert web.always_allow == ("search",)
    shown = json.dumps([s.shown() for s in (files, web, old)])
    assert "s3cret" not in shown and "TOKEN" in shown and "Authorization" in shown
    path = servers_file()
    path.write_text(text)
    save([files, web])
    assert read_file(path) == [files, web]
    assert json.loads(path.read_text())["other"] == {"kept": 1}  # what other apps' notation adds stays
    assert path.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("text, words", [
    ("{not json", "is not JSON"),
    ('{"mcpServers": []}', "must hold"),
    ('{"mcpServers": {"a b": {"command": "x"}}}', "a server's name"),
    ('{"mcpServers": {"x": {"command": "a", "url": "http://h"}}}', "exactly one of command"),
    ('{"mcpServers": {"x": {"url": "file:///etc/passwd"}}}', "must start with http"),
    ('{"mcpServers": {"x": {"command": "a", "args": "not a list"}}}', "x'.args must be a list"),
    ('{"mcpServers": {"x": {"command": "a", "env": {"K": 1}}}}', "env.K must be text"),
    ("[" * 100_000, "is not JSON"),
])
def test_a_bad_servers_file_says_what_is_wrong(text: str, words: str):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
        parse_servers(text, "mcp.json")
