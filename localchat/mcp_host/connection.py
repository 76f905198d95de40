"""One MCP server, connected when first needed and supervised like a runner: a crash is noticed and the next
call starts it again, a hung call ends at its timeout with an error naming the server, its process tree ends
with it (the SDK's stdio transport kills the group), its stderr goes to localchat's log, and a
`tools/list_changed` notification makes the next listing ask again. Lives on the BackgroundLoop."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..errors import ToolServerError
from .results import ToolOutcome, capped, outcome_of
from .servers import ServerSpec

log = logging.getLogger(__name__)

CONNECT_SECONDS = 30.0  # a stdio server starting (an npx download, a Python import) or a handshake
MAX_TOOLS = 128
MAX_DESCRIPTION = 2000  # characters of a tool's description the model reads
MAX_SCHEMA_CHARS = 16_000  # a tool's input schema, as JSON
TOOL_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """One tool as a server lists it, bounded: what the model is told and what the user is shown."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool = False  # the server's own hint; shown, never trusted to skip an approval


def _tool_info(server: str, tool: Any) -> ToolInfo | None:
    import json

    name = str(getattr(tool, "name", ""))
    if not 0 < len(name) <= 64 or not set(name) <= TOOL_NAME_CHARS:
        log.warning("MCP server %s lists a tool named %r, which is no function name; it is left out", server,
                    name[:80])
        return None
    schema = getattr(tool, "input_schema", None) or {"type": "object", "properties": {}}
    if not isinstance(schema, dict) or len(json.dumps(schema, default=str)) > MAX_SCHEMA_CHARS:
        log.warning("MCP server %s: the input schema of %s is over %d characters; the tool is left out", server,
                    name, MAX_SCHEMA_CHARS)
        return None
    annotations = getattr(tool, "annotations", None)
    return ToolInfo(server, name, str(getattr(tool, "description", "") or "")[:MAX_DESCRIPTION], schema,
                    bool(getattr(annotations, "read_only_hint", False)))


class _StderrToLog:
    """A pipe whose write end is a stdio server's stderr and whose lines go to the log, one thread reading."""

    def __init__(self, server: str) -> None:
        read, write = os.pipe()
        self.file = os.fdopen(write, "w")
        threading.Thread(target=self._pump, args=(os.fdopen(read, "rb"), server), daemon=True,
                         name=f"mcp-stderr-{server}").start()

    @staticmethod
    def _pump(pipe: Any, server: str) -> None:
        with pipe:
            for line in pipe:
                log.info("MCP server %s: %s", server, line[:2000].decode("utf-8", "replace").rstrip())

    def close(self) -> None:
        self.file.close()


class Connection:
    """One server's session, held open by a task of its own; calls from any task of the same loop."""

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self._client: Any = None
        self._holder: asyncio.Task | None = None
        self._closing: asyncio.Event | None = None
        self._tools: list[ToolInfo] | None = None
        self._starting = asyncio.Lock()
        self._stderr: _StderrToLog | None = None

    def _transport(self) -> Any:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        spec = self.spec
        if spec.command:
            self._stderr = _StderrToLog(spec.name)
            return stdio_client(StdioServerParameters(command=spec.command, args=list(spec.args), env=spec.env),
                                errlog=self._stderr.file)
        import httpx2

        if spec.sse:
            from mcp.client.sse import sse_client

            return sse_client(spec.url, headers=spec.headers or None)
        from mcp.client.streamable_http import streamable_http_client

        client = httpx2.AsyncClient(headers=spec.headers, timeout=httpx2.Timeout(30.0, read=300.0))
        return streamable_http_client(spec.url, http_client=client)

    async def _on_message(self, message: Any) -> None:
        inner = getattr(message, "root", message)
        if getattr(inner, "method", "") == "notifications/tools/list_changed":
            self._tools = None  # the next listing asks the server again

    async def _listen(self, client: Any) -> None:
        """A current server says its tool list changed on a listen stream (an older one by a notification)."""
        try:
            async with client.listen(tools_list_changed=True) as changes:
                async for _ in changes:
                    self._tools = None
        except Exception as exc:  # an older protocol (notifications instead), or the stream lost
            log.debug("MCP server %s: no change stream (%s)", self.spec.name, _reason(exc))

    async def _hold(self, ready: asyncio.Future) -> None:
        from mcp.client.client import Client
        from mcp.types import Implementation

        self._closing = asyncio.Event()
        stderr = None
        try:
            transport = self._transport()
            stderr, self._stderr = self._stderr, None
            async with Client(transport, message_handler=self._on_message, cache=None,
                              client_info=Implementation(name="localchat", version="0.1.0")) as client:
                self._client = client
                ready.set_result(None)
                listener = asyncio.create_task(self._listen(client))
                try:
                    await self._closing.wait()
                finally:
                    listener.cancel()
        except BaseException as exc:  # the transport's task group ends in a group of whatever broke
            if not ready.done():
                ready.set_exception(exc)
            elif not self._closing.is_set() and not isinstance(exc, asyncio.CancelledError):
                log.warning("MCP server %s stopped (%s); it starts again at the next call", self.spec.name,
                            _reason(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            if self._holder is asyncio.current_task():  # a newer connection may have taken over already
                self._client, self._tools = None, None
            if stderr is not None:
                stderr.close()

    @property
    def alive(self) -> bool:
        return self._holder is not None and not self._holder.done() and self._client is not None

    async def _connected(self) -> Any:
        async with self._starting:
            if self.alive:
                return self._client
            ready: asyncio.Future = asyncio.get_running_loop().create_future()
            self._holder = asyncio.create_task(self._hold(ready), name=f"mcp-{self.spec.name}")
            try:
                await asyncio.wait_for(asyncio.shield(ready), CONNECT_SECONDS)
            except asyncio.TimeoutError:
                self._holder.cancel()
                raise ToolServerError(self.spec.name, f"did not finish its start within {CONNECT_SECONDS:.0f} s")
            except Exception as exc:
                raise ToolServerError(self.spec.name, f"could not be started or reached ({_reason(exc)})") from None
            log.info("MCP server %s connected (%s)", self.spec.name, self.spec.transport)
            return self._client

    async def _guarded(self, what: str, coro_of: Any, seconds: float) -> Any:
        """Run one request, raced against the server going away and against `seconds`."""
        from mcp.shared.exceptions import MCPError
        from mcp.types import CONNECTION_CLOSED

        client = await self._connected()
        request = asyncio.ensure_future(coro_of(client))
        holder = self._holder
        assert holder is not None
        try:
            done, _ = await asyncio.wait({request, holder}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the caller stopped waiting (the window's Stop): the request ends too
            request.cancel()
            raise
        stopped = ToolServerError(self.spec.name, f"stopped during {what}; it starts again at the next call")
        if request in done:
            try:
                return request.result()
            except MCPError as exc:
                if exc.code != CONNECTION_CLOSED:
                    raise
                self._drop()  # the session is gone though its task may not know yet: the next call starts anew
                raise stopped from None
        request.cancel()
        if holder in done:
            raise stopped
        raise ToolServerError(self.spec.name, f"did not answer {what} within {seconds:.0f} s (the call timeout)")

    async def tools(self, seconds: float = CONNECT_SECONDS) -> list[ToolInfo]:
        """The server's tools (kept until it says its list changed, or restarts)."""
        if self._tools is not None and self.alive:
            return self._tools
        listed = await self._guarded("the tool listing", lambda c: c.list_tools(), seconds)
        found = [info for tool in (listed.tools or [])[:MAX_TOOLS] if (info := _tool_info(self.spec.name, tool))]
        self._tools = found
        return found

    async def call(self, name: str, arguments: dict[str, Any], seconds: float, max_chars: int) -> ToolOutcome:
        """Call one tool; a tool's own failure is an outcome with is_error, the server's is a ToolServerError."""
        began = time.monotonic()
        try:
            result = await self._guarded(f"a call of {name}", lambda c: c.call_tool(name, arguments), seconds)
            outcome = outcome_of(result, max_chars)
        except ToolServerError:
            raise
        except Exception as exc:  # the server answered with an error (unknown tool, bad arguments...)
            outcome = capped(f"the tool {name} failed: {_reason(exc)}", max_chars, is_error=True)
        outcome.seconds = time.monotonic() - began
        return outcome

    def _drop(self) -> None:
        self._client, self._tools = None, None
        if self._holder is not None:
            self._holder.cancel()

    async def close(self) -> None:
        if self._closing is not None:
            self._closing.set()
        if self._holder is not None:
            await asyncio.wait({self._holder}, timeout=10)  # the SDK stops a stdio server's tree within its grace
            self._holder.cancel()


def _reason(exc: BaseException) -> str:
    """The innermost failure's words, out of the exception groups the SDK's task groups raise."""
    while getattr(exc, "exceptions", None):  # an exception group (anyio's, or 3.11's own)
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return text[:300]
