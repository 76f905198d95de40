"""Every MCP server localchat talks to, each one connection: the user's own (by name, from `mcp.json`) and the
ones an API request names by address. Sync calls for the window's threads, async ones for the API's loop; all
run on one BackgroundLoop. Closed with the process."""

from __future__ import annotations

import atexit
import concurrent.futures
import threading
from collections import OrderedDict
from typing import Any

from ..errors import ToolServerError
from .connection import Connection, ToolInfo
from .loop import BackgroundLoop
from .results import ToolOutcome
from .servers import ServerSpec, configured

MAX_CONNECTIONS = 32  # the oldest unused connection to a request's own server closes past this


class ToolServers:
    """The connections, by server; made on the first use of each."""

    def __init__(self) -> None:
        self._loop: BackgroundLoop | None = None
        self._connections: OrderedDict[ServerSpec, Connection] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def loop(self) -> BackgroundLoop:
        with self._lock:
            if self._loop is None:
                self._loop = BackgroundLoop()
            return self._loop

    def spec(self, name: str) -> ServerSpec:
        """The user's server of that name, from `mcp.json`."""
        for spec in configured():
            if spec.name == name:
                if spec.disabled:
                    raise ToolServerError(name, "is switched off in mcp.json (\"disabled\": true)")
                return spec
        raise ToolServerError(name, "is not in mcp.json; add it there (or in the window) or give its server_url")

    async def _connection(self, spec: ServerSpec) -> Connection:  # on the background loop
        found = self._connections.get(spec)
        if found is None:
            found = self._connections[spec] = Connection(spec)
            while len(self._connections) > MAX_CONNECTIONS:
                _, oldest = self._connections.popitem(last=False)
                await oldest.close()
        self._connections.move_to_end(spec)
        return found

    async def _tools(self, spec: ServerSpec) -> list[ToolInfo]:
        return await (await self._connection(spec)).tools()

    async def _call(self, spec: ServerSpec, name: str, arguments: dict[str, Any], seconds: float,
                    max_chars: int) -> ToolOutcome:
        return await (await self._connection(spec)).call(name, arguments, seconds, max_chars)

    async def atools(self, spec: ServerSpec) -> list[ToolInfo]:
        return await self.loop.arun(self._tools(spec))

    async def acall(self, spec: ServerSpec, name: str, arguments: dict[str, Any], seconds: float,
                    max_chars: int) -> ToolOutcome:
        return await self.loop.arun(self._call(spec, name, arguments, seconds, max_chars))

    def tools(self, spec: ServerSpec) -> list[ToolInfo]:
        return self.loop.run(self._tools(spec))

    def call(self, spec: ServerSpec, name: str, arguments: dict[str, Any], seconds: float,
             max_chars: int) -> ToolOutcome:
        return self.loop.run(self._call(spec, name, arguments, seconds, max_chars))

    def start_call(self, spec: ServerSpec, name: str, arguments: dict[str, Any], seconds: float,
                   max_chars: int) -> concurrent.futures.Future[ToolOutcome]:
        """A call begun for a thread that may stop waiting for it (the window's Stop): cancelling the future
        cancels the call on the loop."""
        return self.loop.submit(self._call(spec, name, arguments, seconds, max_chars))

    def close(self) -> None:
        """End every server (a stdio server's whole process tree) and the loop."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is None:
            return

        async def close_all() -> None:
            for connection in list(self._connections.values()):
                await connection.close()
            self._connections.clear()

        try:
            loop.run(close_all(), timeout=30)
        except TimeoutError:
            pass
        loop.loop.call_soon_threadsafe(loop.loop.stop)


_SERVERS: ToolServers | None = None
_SERVERS_LOCK = threading.Lock()


def tool_servers() -> ToolServers:
    """The process's one ToolServers, closed at exit."""
    global _SERVERS
    with _SERVERS_LOCK:
        if _SERVERS is None:
            _SERVERS = ToolServers()
            atexit.register(_SERVERS.close)
        return _SERVERS
