"""The Tools panel's logic without Gradio: the user's MCP servers as the panel lists them (never a secret's value),
the form that adds or edits one (checked as mcp.json is, written through mcp_host.servers.save), and the offer to
bring in the servers other apps' files hold (only when the user says so)."""

from __future__ import annotations

import html
from pathlib import Path

from ...errors import ConfigError
from ...mcp_host.servers import ServerSpec, configured, elsewhere, read_file, save, spec_of

NEW = ""  # the form's "new server" choice


def listing_html(specs: list[ServerSpec]) -> str:
    """The servers: name, transport, command or URL, the names (not values) of its env and headers, its state."""
    if not specs:
        return '<p class="lc-mcp-none">No MCP servers yet: add one below, or bring in another app\'s.</p>'
    rows = []
    for spec in specs:
        shown = spec.shown()
        where = " ".join([spec.command, *spec.args]) if spec.command else spec.url
        secrets = [f"env: {', '.join(shown['env'])}" if shown["env"] else "",
                   f"headers: {', '.join(shown['headers'])}" if shown["headers"] else "",
                   f"always allowed: {', '.join(spec.always_allow)}" if spec.always_allow else ""]
        notes = " · ".join(s for s in secrets if s)
        rows.append(f'<li class="lc-mcp-server{" lc-mcp-off" if spec.disabled else ""}"><b>{html.escape(spec.name)}'
                    f'</b> <span class="lc-mcp-transport">{spec.transport}{" · off" if spec.disabled else ""}</span>'
                    f'<div class="lc-mcp-where">{html.escape(where)}</div>'
                    + (f'<div class="lc-mcp-notes">{html.escape(notes)}</div>' if notes else "") + "</li>")
    return f'<ul class="lc-mcp-servers">{"".join(rows)}</ul>'


def form_of(spec: ServerSpec | None) -> tuple[str, str, str, str, str, str, bool, str]:
    """The form's fields for a server (name, command, args one a line, url, env and headers as NAME lines: their
    values are never shown, an unchanged NAME keeps its value), off, always-allowed tools."""
    if spec is None:
        return "", "", "", "", "", "", False, ""
    return (spec.name, spec.command, "\n".join(spec.args), spec.url, "\n".join(spec.env), "\n".join(spec.headers),
            spec.disabled, ", ".join(spec.always_allow))


def _pairs(text: str, kept: dict[str, str], what: str) -> dict[str, str]:
    """`NAME=value` lines; a NAME alone (or `NAME=`) keeps the value it had."""
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        name, has_value, value = line.partition("=")
        name = name.strip()
        if not has_value or not value:
            if name not in kept:
                raise ConfigError(f"{what} {name!r} has no value; write it as {name}=value.")
            value = kept[name]
        out[name] = value
    return out


def spec_from_form(name: str, command: str, args: str, url: str, env: str, headers: str, disabled: bool,
                   always: str, old: ServerSpec | None) -> ServerSpec:
    """The server the form describes, checked as an mcp.json entry is (a ConfigError says what to fix)."""
    entry: dict = {}
    if (command or "").strip():
        entry["command"] = command.strip()
    if (url or "").strip():  # both given: refused as mcp.json refuses it, not one silently dropped
        entry["url"] = url.strip()
    if entry.get("command"):
        entry["args"] = [a for a in (args or "").splitlines() if a.strip()]
    entry["env"] = _pairs(env, old.env if old else {}, "the variable")
    entry["headers"] = _pairs(headers, old.headers if old else {}, "the header")
    entry["alwaysAllow"] = [t.strip() for t in (always or "").split(",") if t.strip()]
    entry["disabled"] = bool(disabled)
    if old is not None and old.sse and entry.get("url"):
        entry["type"] = "sse"
    return spec_of((name or "").strip(), entry)


def saved(spec: ServerSpec, replacing: str) -> list[ServerSpec]:
    """mcp.json with `spec` added, or in place of the server named `replacing`; written."""
    specs = configured()
    if spec.name != replacing and any(s.name == spec.name for s in specs):
        raise ConfigError(f"there is already a server named {spec.name!r}; choose it to edit it, or pick another name.")
    specs = [spec if s.name == replacing else s for s in specs] if replacing else [*specs, spec]
    save(specs)
    return specs


def removed(name: str) -> list[ServerSpec]:
    specs = [s for s in configured() if s.name != name]
    save(specs)
    return specs


def offers() -> list[tuple[str, Path, list[ServerSpec]]]:
    """Other apps' servers not here yet (by name): (app, its file, the servers). A file that cannot be read is
    passed over: it is another app's, and the user did not ask for it."""
    here = {s.name for s in configured()}
    found = []
    for app, path in elsewhere().items():
        try:
            new = [s for s in read_file(path) if s.name not in here]
        except ConfigError:
            continue
        if new:
            found.append((app, path, new))
    return found


def offer_text(found: list[tuple[str, Path, list[ServerSpec]]]) -> str:
    if not found:
        return ""
    apps = "; ".join(f"{app} ({path}): {', '.join(s.name for s in specs)}" for app, path, specs in found)
    return f"Found MCP servers in other apps' files: {apps}. Bring them in to use them here."


def brought_in(found: list[tuple[str, Path, list[ServerSpec]]]) -> list[ServerSpec]:
    """The offered servers added to mcp.json (as the other app had them, so a switched-off one stays off)."""
    specs = configured()
    names = {s.name for s in specs}
    for _, _, new in found:
        for spec in new:
            if spec.name not in names:
                specs.append(spec)
                names.add(spec.name)
    save(specs)
    return specs
