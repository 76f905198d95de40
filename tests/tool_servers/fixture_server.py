"""A small MCP server of the project's own for the tests, on the official SDK, over stdio:
`python fixture_server.py [--garbage | --http PORT | --sse PORT]`. Tools: echo, add, slow (sleeps), crash (the process dies mid-call),
huge (a result of N characters), grow (adds a tool and says the list changed), image (a 1x1 PNG), fail (the tool
raises), header (an HTTP header of the call). --garbage writes a line that is not JSON-RPC before it serves (a malformed server)."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

PNG_1X1 = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")

server = MCPServer("fixture")


@server.tool()
def echo(text: Annotated[str, Field(max_length=24)]) -> str:
    """Repeat the text."""
    return f"echo: {text}"


@server.tool()
def add(a: int, b: int) -> str:
    """Add two whole numbers."""
    return str(a + b)


@server.tool()
async def slow(seconds: float) -> str:
    """Wait that many seconds, then say so."""
    # A test that stops a running call sets a floor: a model's own choice of seconds may be 0.
    await asyncio.sleep(max(seconds, float(os.environ.get("FIXTURE_SLOW_AT_LEAST", "0"))))
    return f"waited {seconds} s"


@server.tool()
def crash() -> str:
    """End the server's process in the middle of the call."""
    sys.stderr.write("fixture: crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)


@server.tool()
def huge(chars: int) -> str:
    """A result of that many characters."""
    return "x" * chars


@server.tool()
def fail() -> str:
    """A tool whose own work fails."""
    raise ToolError("the fixture tool failed on purpose")


@server.tool()
def image() -> Image:
    """A 1x1 PNG image."""
    return Image(data=PNG_1X1, format="png")


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of one HTTP header of this request (Streamable HTTP only)."""
    return str((ctx.headers or {}).get(name.lower(), "(none)"))


@server.tool()
async def grow(ctx: Context) -> str:
    """Add a tool named 'grown' and tell the client the tool list changed."""
    server.add_tool(lambda: "grown here", name="grown", description="A tool added at run time.")
    await ctx.notify_tools_changed()
    return "added the tool 'grown'"


if __name__ == "__main__":
    if "--http" in sys.argv:  # Streamable HTTP on 127.0.0.1 at that port, path /mcp
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[sys.argv.index("--http") + 1]))
    elif "--sse" in sys.argv:  # the old HTTP+SSE transport on 127.0.0.1 at that port, path /sse
        server.run("sse", host="127.0.0.1", port=int(sys.argv[sys.argv.index("--sse") + 1]))
    else:
        if "--garbage" in sys.argv:
            print("this is not JSON-RPC {{{", flush=True)
        server.run()
