"""The thin command the MCP conformance suite (`@modelcontextprotocol/conformance client`) runs against
localchat's MCP client: `python scripts/mcp_conformance_client.py SERVER_URL`. It does what localchat does with a
server (mcp_host: connect, list the tools, call them) for the scenario the suite names in
MCP_CONFORMANCE_SCENARIO, and exits 1 on a failure. scripts/mcp-conformance.sh runs the suite with it."""

from __future__ import annotations

import os
import sys

from localchat.mcp_host.hub import ToolServers
from localchat.mcp_host.servers import ServerSpec

# What a scenario's tools are called with: the suite's own test servers name them.
ARGUMENTS = {"add_numbers": {"a": 2, "b": 3}}


def main(url: str) -> int:
    servers = ToolServers()
    spec = ServerSpec(name="conformance", url=url)
    try:
        tools = servers.tools(spec)
        print(f"{os.environ.get('MCP_CONFORMANCE_SCENARIO', '?')}: {len(tools)} tools: "
              f"{', '.join(t.name for t in tools)}")
        for tool in tools:
            outcome = servers.call(spec, tool.name, ARGUMENTS.get(tool.name, {}), 60, 20_000)
            print(f"{tool.name}: {'error: ' if outcome.is_error else ''}{outcome.text[:200]}")
    finally:
        servers.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[-1]))
