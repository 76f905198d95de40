"""Which MCP tools a chat may use, and the user's say over each call: the servers on in a chat (its settings,
`tools`), the tool a message picked for its turn, the approvals the window waits for, and which stdio servers'
commands the user let start (`mcp-started.json`, owner-only, in the config folder).

Nothing here adds a server or starts one unasked: the servers come from the user's mcp.json, a command starts
only once the user has seen it and said yes, and a call runs only when approved (or trusted in mcp.json)."""

from __future__ import annotations

import dataclasses
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ...errors import ToolServerError
from ...mcp_host.connection import ToolInfo
from ...mcp_host.hub import tool_servers
from ...mcp_host.servers import ServerSpec, configured, save
from ...paths import config_dir, write_private_json
from .store import Store

SETTING = "tools"  # a chat's settings key: {"servers": [name, ...], "off": ["server/tool", ...]}
STARTED_FILE = "mcp-started.json"
MAX_STARTED = 256
POLL_S = 0.1  # how often a wait looks at whether the answer was stopped


def command_line(spec: ServerSpec) -> str:
    """A stdio server's command as the user is asked about it (its env values never shown)."""
    return " ".join([spec.command, *spec.args])


class StartedCommands:
    """The stdio commands the user let start from the window, by their whole command line."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    @staticmethod
    def _path() -> Path:
        return config_dir() / STARTED_FILE

    def _read(self) -> list[str]:
        try:
            data = json.loads(self._path().read_text(encoding="utf-8")[: 1 << 20])
        except (OSError, ValueError):
            return []
        found = data.get("commands") if isinstance(data, dict) else None
        return [c for c in found if isinstance(c, str)][:MAX_STARTED] if isinstance(found, list) else []

    def allowed(self, spec: ServerSpec) -> bool:
        return spec.transport != "stdio" or command_line(spec) in self._read()

    def allow(self, spec: ServerSpec) -> None:
        with self._lock:
            commands = [c for c in self._read() if c != command_line(spec)] + [command_line(spec)]
            write_private_json(self._path(), {"commands": commands[-MAX_STARTED:]})


@dataclass(slots=True)
class Choice:
    """What a page chose before its chat existed, and the tool its next message picks."""

    servers: list[str] | None = None  # None: nothing chosen on this page (the chat's own settings hold)
    off: list[str] = field(default_factory=list)  # "server/tool": tools left out
    pick: str = ""  # "server/tool", or "" for none


def selection(settings: dict[str, Any]) -> tuple[list[str], set[str]]:
    """A chat's servers on and the tools it switched off ("server/tool"), from its settings (checked)."""
    raw = settings.get(SETTING)
    raw = raw if isinstance(raw, dict) else {}
    servers = raw.get("servers") if isinstance(raw.get("servers"), list) else []
    off = raw.get("off") if isinstance(raw.get("off"), list) else []
    return [s for s in servers if isinstance(s, str)], {t for t in off if isinstance(t, str)}


@dataclass(slots=True)
class Toolset:
    """An answer's tools, by the name the model calls each: its server and what the server listed."""

    by_name: dict[str, tuple[ServerSpec, ToolInfo]] = field(default_factory=dict)
    forced: str = ""  # a tool the turn picked: the first step must call it
    notes: list[str] = field(default_factory=list)  # servers left out, and why

    def function_tools(self) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": name, "description": tool.description,
                                                  "parameters": tool.input_schema}}
                for name, (_, tool) in self.by_name.items()]


class ChatTools:
    """The window's MCP state, one for every tab."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.started = StartedCommands()
        self.choices: dict[str, Choice] = {}  # page (session) -> its choice
        self.picks: dict[str, str] = {}  # conversation -> the tool its next answer calls first
        self._answers: dict[tuple[str, str], str] = {}  # (conversation, call id) -> the user's answer
        self._asking: set[tuple[str, str]] = set()
        self._cond = threading.Condition()

    # -- what a chat uses ------------------------------------------------------------------------

    def choose(self, session: str, conv_id: str | None, servers: list[str] | None = None,
               pick: str | None = None, off: list[str] | None = None) -> None:
        """A page's choice: saved in its chat's settings when one is open, else kept until its first message."""
        choice = self.choices.setdefault(session, Choice())
        if pick is not None:
            choice.pick = pick
        if servers is None and off is None:
            return
        conv = self.store.get(conv_id) if conv_id else None
        names, was_off = selection(conv.settings) if conv is not None else (choice.servers or [], set(choice.off))
        choice.servers = list(servers) if servers is not None else names
        choice.off = sorted(off) if off is not None else sorted(was_off)
        if conv is not None:
            self.store.update(conv.id, settings=conv.settings | {SETTING: {"servers": choice.servers,
                                                                            "off": choice.off}})

    def bind(self, session: str, conv_id: str) -> None:
        """A message sent from a page to `conv_id`: the page's choice goes with it (called at Send)."""
        choice = self.choices.get(session)
        if choice is None:
            return
        conv = self.store.get(conv_id)
        if conv is not None and choice.servers is not None and SETTING not in conv.settings:
            self.store.update(conv_id, settings=conv.settings | {SETTING: {"servers": choice.servers,
                                                                            "off": choice.off}})
        if choice.pick:  # for this turn only
            self.picks[conv_id], choice.pick = choice.pick, ""

    def on(self, settings: dict[str, Any]) -> bool:
        return bool(selection(settings)[0])

    def toolset(self, conv_id: str, settings: dict[str, Any]) -> Toolset:
        """The chat's tools, listed from its servers (started when first needed, stdio only once allowed)."""
        names, off = selection(settings)
        found = Toolset()
        specs = {spec.name: spec for spec in configured()}
        for name in names:
            spec = specs.get(name)
            if spec is None or spec.disabled:
                found.notes.append(f"{name}: {'switched off' if spec else 'no longer'} in mcp.json")
                continue
            if not self.started.allowed(spec):
                found.notes.append(f"{name}: its command was not allowed to start yet (Tools panel)")
                continue
            try:
                listed = tool_servers().tools(spec)
            except ToolServerError as exc:
                found.notes.append(str(exc))
                continue
            for tool in listed:
                if f"{name}/{tool.name}" not in off and tool.name not in found.by_name:
                    found.by_name[tool.name] = (spec, tool)
        pick = self.picks.pop(conv_id, "")
        server, _, tool = pick.partition("/")
        if tool in found.by_name and found.by_name[tool][0].name == server:
            found.forced = tool
        return found

    def always_allow(self, spec: ServerSpec, tool: str) -> None:
        """"Always for this tool": the tool joins its server's alwaysAllow in mcp.json."""
        specs = configured()
        save([dataclasses.replace(s, always_allow=(*s.always_allow, tool))
              if s.name == spec.name and tool not in s.always_allow else s for s in specs])

    # -- approvals -------------------------------------------------------------------------------

    def wait_for(self, conv_id: str, call_id: str, stopped: Callable[[], bool]) -> str:
        """The user's answer to a call ("once", "always", "deny"), or "stopped" when the answer is stopped."""
        key = (conv_id, call_id)
        with self._cond:
            self._asking.add(key)
            try:
                while key not in self._answers:
                    if stopped():
                        return "stopped"
                    self._cond.wait(POLL_S)
                return self._answers.pop(key)
            finally:
                self._asking.discard(key)

    def answer(self, conv_id: str, call_id: str, choice: str) -> bool:
        """A click on a card: True when that call was waiting for it."""
        key = (conv_id, call_id)
        with self._cond:
            # Answered once: a second click (another tab's, a quick double click) changes nothing.
            if key not in self._asking or key in self._answers or choice not in ("once", "always", "deny"):
                return False
            self._answers[key] = choice
            self._cond.notify_all()
            return True
