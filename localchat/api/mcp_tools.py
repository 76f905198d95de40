"""A request's MCP servers as the model's tools: OpenAI's Responses `mcp` tool
(`{"type": "mcp", "server_label", "server_url", "headers", "allowed_tools", "require_approval"}`) resolved to
servers (the user's own by `server_label` alone, from mcp.json; a request's own by `server_url`), their tools
listed (a server that cannot be reached is a ToolServerError: 424), offered to the model as function tools under
their own names, and each call run only as `require_approval` and the user's answers allow.

A request may start no program: stdio servers come from the user's own mcp.json only. A request's own
`server_url` is taken from a client on this machine alone (one reaching an exposed server names the user's
servers by label), so the API is no way to make this machine reach other hosts for someone elsewhere.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import RequestError
from ..mcp_host.connection import ToolInfo
from ..mcp_host.hub import tool_servers
from ..mcp_host.results import ToolOutcome
from ..mcp_host.servers import NAME, ServerSpec, spec_of

APPROVALS = ("always", "never")


@dataclass(slots=True)
class ServerUse:
    """One `mcp` tool of a request: its server, the tools it allows, and which calls wait for approval."""

    label: str
    spec: ServerSpec
    allowed: frozenset[str] | None  # None: every tool the server lists
    default_approval: bool  # True: a call waits for the user's approval
    approval_exceptions: frozenset[str]  # tools named under the other choice
    excluded: frozenset[str] = frozenset()  # tools switched off by name
    tools: list[ToolInfo] = field(default_factory=list)

    def needs_approval(self, tool: str) -> bool:
        return self.default_approval != (tool in self.approval_exceptions)


def _names(value: Any, where: str) -> frozenset[str]:
    names = value.get("tool_names") if isinstance(value, dict) else value
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or len(names) > 256:
        raise RequestError(f"{where} must be a list of tool names (or {{'tool_names': [...]}}).", where)
    return frozenset(names)


def _approval(value: Any, where: str) -> tuple[bool, frozenset[str]]:
    """require_approval: "always" (OpenAI's default), "never", or {"never"|"always": {"tool_names": [...]}}."""
    if value is None or value in APPROVALS:
        return value != "never", frozenset()
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in APPROVALS:
        choice, names = next(iter(value.items()))
        # {"never": {...}}: those tools run unasked, the rest wait; {"always": {...}}: the other way round.
        return choice == "never", _names(names, f"{where}.{choice}")
    raise RequestError(f"{where} must be 'always', 'never', or {{'never': {{'tool_names': [...]}}}}.", where)


def _use(tool: dict[str, Any], where: str, local_client: bool) -> ServerUse:
    label = tool.get("server_label")
    if not isinstance(label, str) or not NAME.fullmatch(label):
        raise RequestError(f"{where}.server_label must name the server in 1-64 letters, digits, '.', '_' or '-'.",
                           f"{where}.server_label")
    if tool.get("connector_id"):
        raise RequestError(f"{where}.connector_id: this server runs no hosted connectors; give a server_url, or "
                           "a server_label from mcp.json.", f"{where}.connector_id")
    if tool.get("server_url"):
        if not local_client:
            raise RequestError(f"{where}.server_url: a client on another machine names the user's MCP servers by "
                               "server_label (from mcp.json) only.", f"{where}.server_url")
        spec = spec_of(label, {"url": tool["server_url"], "headers": tool.get("headers") or {}})
    else:
        spec = tool_servers().spec(label)
    allowed = tool.get("allowed_tools")
    default, exceptions = _approval(tool.get("require_approval"), f"{where}.require_approval")
    return ServerUse(label, spec, None if allowed is None else _names(allowed, f"{where}.allowed_tools"), default,
                     exceptions)


@dataclass(slots=True)
class Toolset:
    """The request's MCP servers and their tools, by the name the model calls each tool."""

    uses: list[ServerUse]
    by_name: dict[str, tuple[ServerUse, ToolInfo]] = field(default_factory=dict)

    def function_tools(self) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": name, "description": tool.description,
                                                  "parameters": tool.input_schema}}
                for name, (_, tool) in self.by_name.items()]

    def use_of(self, label: str) -> ServerUse | None:
        return next((use for use in self.uses if use.label == label), None)

    async def call(self, use: ServerUse, name: str, arguments: str, seconds: float, max_chars: int) -> ToolOutcome:
        """Run one call; arguments that are not a JSON object are the model's mistake, told back to it."""
        try:
            parsed = json.loads(arguments or "{}")
        except (ValueError, RecursionError):
            parsed = None
        if not isinstance(parsed, dict):
            return ToolOutcome("the arguments were not a JSON object; call the tool again with an object.",
                               is_error=True)
        return await tool_servers().acall(use.spec, name, parsed, seconds, max_chars)


def _is_local(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def responses_uses(tools: list[Any], client_host: str) -> list[ServerUse]:
    """The `mcp` tools of an OpenAI Responses request as the servers they name."""
    local_client = _is_local(client_host)
    return [_use(tool, f"tools.{i}", local_client) for i, tool in enumerate(tools)
            if isinstance(tool, dict) and tool.get("type") == "mcp"]


def anthropic_uses(servers: list[Any], tools: list[Any], client_host: str) -> list[ServerUse]:
    """Anthropic's MCP connector as the servers it names: `mcp_servers` [{type: url, url, name,
    authorization_token, tool_configuration: {enabled, allowed_tools}}], with an `mcp_toolset` tool per server
    ({mcp_server_name, default_config: {enabled}, configs: {tool: {enabled}}}) where the client sends one. Its
    calls run without asking, as Anthropic's connector runs them (the client chose the servers and tools). A
    server without a url is the user's own of that name (mcp.json)."""
    local_client = _is_local(client_host)
    toolsets = {t.get("mcp_server_name"): t for t in tools if isinstance(t, dict) and t.get("type") == "mcp_toolset"}
    uses = []
    for i, server in enumerate(servers):
        where = f"mcp_servers.{i}"
        if not isinstance(server, dict) or server.get("type", "url") != "url":
            raise RequestError(f"{where} must be {{'type': 'url', 'url': ..., 'name': ...}}.", where)
        token = server.get("authorization_token")
        headers = {"Authorization": f"Bearer {token}"} if isinstance(token, str) and token else {}
        use = _use({"server_label": server.get("name"), "server_url": server.get("url"), "headers": headers,
                    "require_approval": "never"}, where, local_client)
        configuration = server.get("tool_configuration") or {}
        if configuration.get("allowed_tools") is not None:
            use.allowed = _names(configuration["allowed_tools"], f"{where}.tool_configuration.allowed_tools")
        toolset = toolsets.get(use.label) or {}
        configs = toolset.get("configs") or {}
        enabled = {n for n, c in configs.items() if isinstance(c, dict) and c.get("enabled") is True}
        if configuration.get("enabled") is False or (toolset.get("default_config") or {}).get("enabled") is False:
            use.allowed = frozenset(enabled) & (use.allowed or frozenset(enabled))
        use.excluded = frozenset(n for n, c in configs.items() if isinstance(c, dict) and c.get("enabled") is False)
        uses.append(use)
    return uses


async def toolset_of(uses: list[ServerUse], function_names: set[str]) -> Toolset:
    """The servers' tools, listed (a server that cannot be reached raises ToolServerError), by the names the
    model calls them."""
    if len({use.label for use in uses}) != len(uses):
        raise RequestError("each MCP server needs a name (server_label) of its own.", "tools")
    toolset = Toolset(uses)
    for use in uses:
        listed = await tool_servers().atools(use.spec)
        use.tools = [t for t in listed if (use.allowed is None or t.name in use.allowed)
                     and t.name not in use.excluded]
        for tool in use.tools:
            if tool.name in toolset.by_name or tool.name in function_names:
                raise RequestError(f"two tools are named {tool.name!r} (MCP server {use.label!r} and another); "
                                   "leave one out with allowed_tools.", "tools")
            toolset.by_name[tool.name] = (use, tool)
    return toolset


def listed_tools(use: ServerUse) -> list[dict[str, Any]]:
    """A server's tools as an `mcp_list_tools` item shows them."""
    return [{"name": t.name, "description": t.description, "input_schema": t.input_schema,
             "annotations": {"read_only": t.read_only}} for t in use.tools]


