"""The MCP conformance suite (@modelcontextprotocol/conformance, from the npm registry) against localchat's MCP
client and against its own MCP server at /mcp, through scripts/mcp-conformance.sh: the scenarios localchat claims
(the handshake, tools listed and called, an SSE stream resumed; the server's handshake, ping, tool list and its
Host/Origin checks) must all pass."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "scripts" / "mcp-conformance.sh"


def test_the_conformance_suite_passes_for_the_client_and_the_server(url: str):
    done = subprocess.run(["bash", str(SCRIPT), url], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHON": sys.executable})
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-4000:]
    passed = re.findall(r"Passed: (\d+)/(\d+), 0 failed", said)
    assert len(passed) == 7 and all(a == b != "0" for a, b in passed) and "FAILED" not in said, said[-4000:]
