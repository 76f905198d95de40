"""The MCP servers the user configured, in `mcp.json` in localchat's config folder, in the notation LM Studio,
Cursor and Claude Desktop share: `{"mcpServers": {NAME: {"command", "args", "env"} | {"url", "headers"}}}`.

Only the user adds a server: by editing this file or through the window's form (which writes it); nothing a
page, an imported chat or a model writes reaches it. A server may say `"disabled": true`, `"type": "sse"` (an
old server's transport) and `"alwaysAllow": [tool, ...]` (tools that run without asking, as Cline names
them). Values that carry secrets (`env`, `headers`) are kept in this file only: `shown()` is what a page or a
log may show. The file is bounded and checked like any input: an error names the server and the field.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..paths import config_dir, write_private_json

FILE_NAME = "mcp.json"
MAX_FILE_BYTES = 1 << 20
MAX_SERVERS = 64
MAX_TEXT = 4096  # one command, argument, URL or value
NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
TRANSPORTS = ("stdio", "http", "sse")


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """One server: a command to start (stdio) or an address (Streamable HTTP, or SSE for old servers)."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, hash=False, compare=True)
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict, hash=False, compare=True)
    sse: bool = False  # an old server's HTTP+SSE transport
    disabled: bool = False
    always_allow: tuple[str, ...] = ()  # tools that run without the user's approval

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "sse" if self.sse else "http"

    def shown(self) -> dict[str, Any]:
        """What a page, a log or an export may show: secrets' names, never their values."""
        where = {"command": self.command, "args": list(self.args)} if self.command else {"url": self.url}
        return {"name": self.name, "transport": self.transport, **where, "env": sorted(self.env),
                "headers": sorted(self.headers), "disabled": self.disabled, "alwaysAllow": list(self.always_allow)}

    def entry(self) -> dict[str, Any]:
        """This server as `mcp.json` writes it."""
        out: dict[str, Any] = ({"command": self.command, "args": list(self.args)} if self.command
                               else {"url": self.url})
        if self.env:
            out["env"] = dict(self.env)
        if self.headers:
            out["headers"] = dict(self.headers)
        if self.sse:
            out["type"] = "sse"
        if self.disabled:
            out["disabled"] = True
        if self.always_allow:
            out["alwaysAllow"] = list(self.always_allow)
        return out


def servers_file() -> Path:
    return config_dir() / FILE_NAME


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT or "\x00" in value:
        raise ConfigError(f"{where} must be text of at most {MAX_TEXT} characters.")
    return value


def _strings(value: Any, where: str, limit: int = 256) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > limit:
        raise ConfigError(f"{where} must be a list of at most {limit} strings.")
    return tuple(_text(v, f"{where}[{i}]") for i, v in enumerate(value))


def _mapping(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or len(value) > 256:
        raise ConfigError(f"{where} must be an object of at most 256 names and string values.")
    return {_text(k, f"{where} name"): _text(v, f"{where}.{k}") for k, v in value.items()}


def spec_of(name: str, entry: Any) -> ServerSpec:
    """One `mcpServers` entry, checked; the error says which server and field is wrong."""
    where = f"MCP server {name!r}"
    if not NAME.fullmatch(name):
        raise ConfigError(f"{where}: a server's name is 1-64 letters, digits, '.', '_' or '-'.")
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be an object with a command (and args, env) or a url (and headers).")
    command, url = entry.get("command"), entry.get("url") or entry.get("serverUrl")
    if bool(command) == bool(url):
        raise ConfigError(f"{where} needs exactly one of command (a program to start) or url (a server's address).")
    if url is not None:
        url = _text(url, f"{where}.url")
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"{where}.url must start with http:// or https://.")
    kind = entry.get("type") or entry.get("transport")
    if kind is not None and kind not in (*TRANSPORTS, "streamable-http", "streamableHttp"):
        raise ConfigError(f"{where}.type must be one of {', '.join(TRANSPORTS)}.")
    return ServerSpec(name=name, command=_text(command, f"{where}.command") if command else "",
                      args=_strings(entry.get("args", []), f"{where}.args"),
                      env=_mapping(entry.get("env", {}), f"{where}.env"), url=url or "",
                      headers=_mapping(entry.get("headers", {}), f"{where}.headers"), sse=kind == "sse",
                      disabled=entry.get("disabled") is True,
                      always_allow=_strings(entry.get("alwaysAllow", []), f"{where}.alwaysAllow"))


def parse_servers(text: str, origin: str) -> list[ServerSpec]:
    """The servers of an `mcp.json` text (`origin` names the file in errors)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{origin} is not JSON ({exc}); fix it or move it away.") from None
    found = data.get("mcpServers", {}) if isinstance(data, dict) else None
    if not isinstance(found, dict) or len(found) > MAX_SERVERS:
        raise ConfigError(f"{origin} must hold {{\"mcpServers\": {{NAME: {{...}}}}}} with at most {MAX_SERVERS} "
                          "servers.")
    return [spec_of(name, entry) for name, entry in found.items()]


def read_file(path: Path) -> list[ServerSpec]:
    """The servers of an `mcp.json` file; none when it is missing."""
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ConfigError(f"cannot read {path} ({exc.strerror or exc}).") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"{path} is over {MAX_FILE_BYTES >> 10} KiB; an MCP servers file is a few lines.")
    return parse_servers(raw.decode("utf-8", "replace"), str(path))


def configured() -> list[ServerSpec]:
    """The servers of localchat's own `mcp.json`."""
    return read_file(servers_file())


def save(specs: list[ServerSpec]) -> None:
    """Write localchat's `mcp.json` (owner-only: it holds keys), keeping what other apps' notation adds."""
    path = servers_file()
    try:
        with open(path, encoding="utf-8") as file:
            kept = json.load(file)
        kept = kept if isinstance(kept, dict) else {}
    except (OSError, ValueError):
        kept = {}
    kept["mcpServers"] = {spec.name: spec.entry() for spec in specs}
    write_private_json(path, kept)


def elsewhere() -> dict[str, Path]:
    """Other apps' MCP server files on this machine, which the window offers to bring in (never silently)."""
    home = Path.home()
    appdata = Path(os.environ.get("APPDATA", home / "AppData" / "Roaming"))
    candidates = {
        "Claude Desktop": [home / ".config" / "Claude" / "claude_desktop_config.json",
                           home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json",
                           appdata / "Claude" / "claude_desktop_config.json"],
        "Cursor": [home / ".cursor" / "mcp.json"],
        "LM Studio": [home / ".lmstudio" / "mcp.json", home / ".cache" / "lm-studio" / "mcp.json"],
    }
    found = {}
    for app, paths in candidates.items():
        here = next((path for path in paths if path.is_file()), None)
        if here is not None:
            found[app] = here
    return found
