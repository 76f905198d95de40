"""localchat as an MCP server, through the official MCP client: at /mcp on the serve port (behind the API's
key like every route) and over stdio (`localchat mcp`, a child process as Claude Desktop would start it): the
local model answers `ask`, `search_documents` finds a planted fact in an attached document with its source,
`find_in_chats` finds a chat."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp_fixtures import MODEL
from ui_server import serve_in_thread

from localchat.api.app import create_app
from localchat.api.local import LocalService
from localchat.mcp_server import build_server
from localchat.ui.chat.store import Store
from localchat.ui.documents.uploads import store_upload

TOOLS = {"ask", "search_documents", "find_in_chats"}
QUESTION = "Name the capital city of France."


async def _use(server, calls: list[tuple[str, dict]]) -> tuple[set[str], list[str]]:
    async with Client(server) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        texts = []
        for name, arguments in calls:
            result = await client.call_tool(name, arguments)
            assert not result.is_error, result
            texts.append("".join(block.text for block in result.content if block.type == "text"))
        return names, texts


def test_mcp_on_the_serve_port_answers_from_the_model_documents_and_chats(url: str, tmp_path: Path):
    note = tmp_path / "harbour-notes.txt"
    note.write_text("Notes on the harbour.\n\nThe ferry to the island leaves from pier 47 every morning.\n")
    store_upload(note)
    store = Store()
    chat = store.create("Trip planning")
    store.append(chat, "user", "Which pier does the ferry to the island leave from?")
    store.close()
    names, (answer, passages, chats) = asyncio.run(_use(url + "/mcp", [
        ("ask", {"question": QUESTION, "max_tokens": 24}),
        ("search_documents", {"query": "ferry island pier"}),
        ("find_in_chats", {"query": "ferry to the island"})]))
    assert names == TOOLS
    assert "Paris" in answer
    assert "pier 47" in passages and "harbour-notes.txt" in passages
    assert chats.startswith("Trip planning (") and "Which pier" in chats


def test_mcp_on_the_serve_port_needs_the_key_when_the_api_does(engine):
    service = LocalService(engine, MODEL)
    keyed, server, thread = serve_in_thread(create_app(service, api_key="k" * 32, mcp=build_server(service)))
    try:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        refused = httpx.post(keyed + "/mcp", json=body, headers={"Accept": "application/json, text/event-stream"})
        assert refused.status_code == 401 and "API key" in refused.text
        foreign = httpx.post(keyed + "/mcp", json=body, headers={"Origin": "https://evil.example",
                                                                  "Authorization": "Bearer " + "k" * 32})
        assert foreign.status_code == 403
    finally:
        server.should_exit = True
        thread.join(10)


def test_localchat_mcp_over_stdio(model_path: Path):
    command = StdioServerParameters(command=sys.executable,
                                    args=["-m", "localchat", "mcp", "--model", str(model_path), "--threads", "1"])
    names, (answer,) = asyncio.run(_use(command, [("ask", {"question": QUESTION, "max_tokens": 24})]))
    # The model runs with the settings' defaults here (not the deterministic kernels): some answer, whatever it says.
    assert names == TOOLS and len(answer.split()) >= 3
