"""localchat as an MCP server, for Claude Desktop, Cursor or any agent: the local model (`ask`), the user's
documents (`search_documents`: passages and their sources) and chats (`find_in_chats`). Over stdio
(`localchat mcp`, the same model options as `serve`) or at /mcp on `localchat serve`'s port, behind the same
Host, origin and key checks as the rest of the API (api/app.py). Each tool's reply is text: what the caller's
model reads."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from starlette.requests import Request as HTTPRequest

from .api.service import AskedSampling, Generation, Service
from .errors import LocalchatError
from .ingest.chunking import chunk_document
from .ingest.document import Document
from .ingest.retrieve import bm25_scores
from .ui.chat.store import Store
from .ui.documents.uploads import read_upload, uploads_dir

MAX_QUESTION_CHARS = 100_000
MAX_ANSWER_TOKENS = 4096
MAX_DOCUMENTS = 200  # the newest attachments searched
MAX_RESULTS = 20
INSTRUCTIONS = ("localchat runs a language model on this machine and keeps the user's chats and the documents "
                "they attached. ask: a question to the local model. search_documents: passages of the attached "
                "documents that match a query, with their sources. find_in_chats: the user's chats that mention "
                "a phrase.")


async def _never_leaves() -> dict[str, Any]:
    await asyncio.Event().wait()  # an MCP call has no HTTP client that could go away mid-answer
    return {"type": "http.disconnect"}


def _request() -> HTTPRequest:
    return HTTPRequest({"type": "http", "method": "POST", "path": "/mcp", "headers": []}, _never_leaves)


class Documents:
    """The attached documents, read once per file version, searched by BM25 over their chunks."""

    def __init__(self) -> None:
        self._read: dict[tuple[Path, float], Document | None] = {}

    def _documents(self) -> list[Document]:
        files = [f for folder in uploads_dir().iterdir() if folder.is_dir() for f in folder.iterdir() if f.is_file()]
        files.sort(key=lambda f: f.stat().st_mtime, reverse=True)
        found = []
        for file in files[:MAX_DOCUMENTS]:
            key = (file, file.stat().st_mtime)
            if key not in self._read:
                try:
                    self._read[key] = read_upload(file)
                except LocalchatError:
                    self._read[key] = None  # a document that cannot be read is left out, not retried
            if self._read[key] is not None:
                found.append(self._read[key])
        return found

    def search(self, query: str, limit: int) -> str:
        chunks = [c for doc in self._documents() for c in chunk_document(doc)]
        if not chunks:
            return "No documents are attached in localchat yet."
        scores = bm25_scores(query, [c.text for c in chunks])
        best = sorted(range(len(chunks)), key=lambda i: -scores[i])[:limit]
        found = [f"[{chunks[i].document}, {chunks[i].label}]\n{chunks[i].text}" for i in best if scores[i] > 0]
        return "\n\n".join(found) if found else f"No passage of the attached documents matches {query!r}."


def build_server(service: Service, store_path: Path | None = None) -> Any:
    """The MCP server (the SDK's MCPServer) with localchat's tools, answered by `service`."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("localchat", instructions=INSTRUCTIONS)
    documents = Documents()

    @server.tool()
    async def ask(question: str, system: str = "", max_tokens: int = 512) -> str:
        """Ask the language model that runs on this machine; its answer comes back as text."""
        if not question.strip() or len(question) > MAX_QUESTION_CHARS:
            raise ValueError(f"the question must be 1 to {MAX_QUESTION_CHARS} characters.")
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user",
                                                                                  "content": question}]
        sampling = AskedSampling(max_tokens=max(1, min(max_tokens, MAX_ANSWER_TOKENS)))
        answer = await service.generate(Generation(messages=messages, sampling=sampling), _request())
        async for _ in answer.events():
            pass
        return "".join(answer.content)

    @server.tool()
    async def search_documents(query: str, limit: int = 5) -> str:
        """Passages of the documents attached in localchat's chats that match the query, each with its source."""
        return await asyncio.to_thread(documents.search, query[:1000], max(1, min(limit, MAX_RESULTS)))

    @server.tool()
    async def find_in_chats(query: str, limit: int = 10) -> str:
        """The user's localchat chats whose title or messages hold the phrase: title, date and matching lines."""
        return await asyncio.to_thread(_find_in_chats, store_path, query[:1000], max(1, min(limit, MAX_RESULTS)))

    return server


def _find_in_chats(store_path: Path | None, query: str, limit: int) -> str:
    import time

    store = Store(store_path)
    try:
        found = []
        for summary in store.search(query)[:limit]:
            chat = store.get(summary.id)
            lines = [f"{m.role}: {m.content[:300]}" for m in (chat.messages if chat else [])
                     if query.lower() in m.content.lower()][:3]
            day = time.strftime("%Y-%m-%d", time.localtime(summary.updated))
            found.append("\n".join([f"{summary.title} ({day})", *lines]))
    finally:
        store.close()
    return "\n\n".join(found) if found else f"No chat mentions {query!r}."
