"""What the MCP tests share: the fixture server's path, a stdio server's spec, a free loopback port."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from localchat.mcp_host.servers import ServerSpec

FIXTURE = Path(__file__).with_name("fixture_server.py")
MODEL = "smollm2-135m"


def stdio_spec(name: str = "fixture", *flags: str, **env: str) -> ServerSpec:
    return ServerSpec(name=name, command=sys.executable, args=(str(FIXTURE), *flags), env=env)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


