"""The Tools panel: the user's MCP servers (mcp.json) listed, added, edited, switched off and removed through a form,
other apps' servers offered (never brought in silently), which servers are on in this chat, and a stdio server's
command shown and asked about before it first starts; the composer's "Tool for this turn"; and the approval a
call's card asks for (its buttons are in the chat; the page script sends the click here). Logic in
ui/chat/server_form.py, ui/chat/chat_tools.py and ui/chat/tool_loop.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from ...errors import LocalchatError, ToolServerError
from ...mcp_host.hub import tool_servers
from ...mcp_host.servers import ServerSpec, configured
from ..chat import server_form
from ..chat.chat_tools import command_line, selection
from .window import Window

NO_TOOL = ""


@dataclass(slots=True)
class ToolsPanel:
    listing: gr.HTML
    offer: gr.Markdown
    bring_in: gr.Button
    pick: gr.Dropdown  # which server the form edits
    fields: list[Any]  # name, command, args, url, env, headers, off, always allowed
    save: gr.Button
    remove: gr.Button
    on: gr.CheckboxGroup  # the servers on in this chat
    off: gr.CheckboxGroup  # their tools left out of it
    consent: gr.Markdown
    allow: gr.Button
    turn_tool: gr.Dropdown  # the composer's tool for this turn
    approval: gr.Textbox  # the page script's "CALL_ID:CHOICE" of a card's button
    approval_go: gr.Button


def build_turn_tool() -> gr.Dropdown:
    """The composer's "Tool for this turn" (placed under the chat by layout.py): its call is forced."""
    return gr.Dropdown([("none: the model decides", NO_TOOL)], value=NO_TOOL, label="Tool for this turn",
                       elem_id="tool-pick", interactive=True, scale=0, min_width=220)


def build(turn_tool: gr.Dropdown) -> ToolsPanel:
    """The panel's components (inside the Blocks being built)."""
    specs = configured_or_none()
    with gr.Accordion("Tools: MCP servers", open=False, elem_id="tools-panel"):
        on = gr.CheckboxGroup(choices=_names(specs), value=[], label="On in this chat", elem_id="mcp-on")
        off = gr.CheckboxGroup(choices=[], value=[], label="Their tools left out of this chat", elem_id="mcp-off-tools")
        consent = gr.Markdown("", elem_id="mcp-consent")
        allow = gr.Button("Allow it to start", size="sm", visible=False, elem_id="mcp-allow")
        listing = gr.HTML(server_form.listing_html(specs), elem_id="mcp-servers")
        offer = gr.Markdown("", elem_id="mcp-offer")
        bring_in = gr.Button("Bring them in", size="sm", visible=False, elem_id="mcp-bring-in")
        pick = gr.Dropdown([("add a new server", server_form.NEW)] + [(n, n) for n in _names(specs)],
                           value=server_form.NEW, label="Server", elem_id="mcp-edit")
        with gr.Row():
            name = gr.Textbox(label="Name", elem_id="mcp-name", placeholder="letters, digits, . _ -")
            command = gr.Textbox(label="Command (a program to start)", elem_id="mcp-command")
            url = gr.Textbox(label="or URL (a running server)", elem_id="mcp-url", placeholder="http://…")
        with gr.Row():
            args = gr.Textbox(label="Arguments, one a line", lines=2, elem_id="mcp-args")
            env = gr.Textbox(label="Environment, NAME=value a line", lines=2, elem_id="mcp-env",
                             info="Values are never shown again: a NAME alone keeps its value.")
            headers = gr.Textbox(label="Headers, NAME=value a line", lines=2, elem_id="mcp-headers")
        with gr.Row():
            disabled = gr.Checkbox(label="Switched off", elem_id="mcp-off")
            always = gr.Textbox(label="Tools that run without asking (comma-separated)", elem_id="mcp-always")
        with gr.Row():
            save = gr.Button("Save server", size="sm", variant="primary", elem_id="mcp-save")
            remove = gr.Button("Remove server", size="sm", variant="stop", elem_id="mcp-remove")
    approval = gr.Textbox(elem_id="tool-approval", elem_classes="lc-hidden", show_label=False, container=False)
    approval_go = gr.Button("Answer", elem_id="tool-approval-go", elem_classes="lc-hidden")
    return ToolsPanel(listing, offer, bring_in, pick, [name, command, args, url, env, headers, disabled, always],
                      save, remove, on, off, consent, allow, turn_tool, approval, approval_go)


def configured_or_none() -> list[ServerSpec]:
    try:
        return configured()
    except LocalchatError:  # a broken mcp.json: the panel says so when it is used
        return []


def _names(specs: list[ServerSpec]) -> list[str]:
    return [s.name for s in specs if not s.disabled]


def _edit_choices(specs: list[ServerSpec], value: str = server_form.NEW) -> dict[str, Any]:
    return gr.update(choices=[("add a new server", server_form.NEW)] + [(s.name, s.name) for s in specs], value=value)


def waiting_to_start(names: list[str], core: Any) -> list[ServerSpec]:
    """The chosen stdio servers whose command the user has not let start yet."""
    return [s for s in configured_or_none() if s.name in names and not s.disabled and not core.tools.started.allowed(s)]


def tool_choices(names: list[str], off: list[str], core: Any) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The tools of the chosen servers that may start (each listed; one that cannot be reached is said in the
    note): the "Tool for this turn" choices (those not left out), and the ones to leave out."""
    tools, notes = [], []
    for spec in configured_or_none():
        if spec.name in names and not spec.disabled and core.tools.started.allowed(spec):
            try:
                tools += [(f"{spec.name} · {t.name}", f"{spec.name}/{t.name}") for t in tool_servers().tools(spec)]
            except ToolServerError as exc:
                notes.append(str(exc))
    picks = [("none: the model decides", NO_TOOL)] + [t for t in tools if t[1] not in off]
    known = {value for _, value in tools}
    return (gr.update(choices=picks, value=NO_TOOL), gr.update(choices=tools, value=[t for t in off if t in known]),
            " ".join(notes))


def consent_text(waiting: list[ServerSpec]) -> str:
    if not waiting:
        return ""
    lines = "\n".join(f"- **{s.name}**: `{command_line(s)}`" for s in waiting)
    return ("These servers start a program on this machine, as you, the first time a chat uses them. "
            f"Allow only commands you trust:\n{lines}")


def wire(w: Window, panel: ToolsPanel, sends: list[Any], demo: gr.Blocks) -> None:
    """The panel's events; `sends`: the events that send a message (the turn's tool goes with it)."""
    core = w.core
    fields = panel.fields

    def refreshed(specs: list[ServerSpec], chosen: str = server_form.NEW) -> tuple:
        found = server_form.offers()
        return (server_form.listing_html(specs), _edit_choices(specs, chosen), gr.update(choices=_names(specs)),
                server_form.offer_text(found), gr.update(visible=bool(found)))
    refresh_out = [panel.listing, panel.pick, panel.on, panel.offer, panel.bring_in]

    def save(chosen: str, *values: Any) -> tuple:
        old = next((s for s in configured_or_none() if s.name == chosen), None) if chosen else None
        try:
            spec = server_form.spec_from_form(*values, old=old)
            specs = server_form.saved(spec, chosen)
        except LocalchatError as exc:
            gr.Warning(str(exc))
            return (gr.skip(),) * (len(refresh_out) + len(fields))
        gr.Info(f"MCP server {spec.name!r} saved in mcp.json.")
        return *refreshed(specs, spec.name), *server_form.form_of(spec)  # the form as saved: secrets' names only

    def remove(chosen: str) -> tuple:
        if not chosen:
            gr.Warning("choose a server to remove first.")
            return (gr.skip(),) * (len(refresh_out) + len(fields))
        return *refreshed(server_form.removed(chosen)), *server_form.form_of(None)

    def edit(chosen: str) -> tuple:
        return server_form.form_of(next((s for s in configured_or_none() if s.name == chosen), None))

    def bring_in() -> tuple:
        return refreshed(server_form.brought_in(server_form.offers()))

    def chosen(names: list[str], cid: str | None, request: gr.Request) -> tuple:
        """Servers switched on or off in this chat: kept, then a new command shown before it may start."""
        core.tools.choose(request.session_hash, cid, servers=names or [])
        waiting = waiting_to_start(names or [], core)
        picks, off, note = tool_choices(names or [], left_out(cid, request), core)
        return consent_text(waiting) + (f"\n\n{note}" if note else ""), gr.update(visible=bool(waiting)), picks, off

    def left_out(cid: str | None, request: gr.Request) -> list[str]:
        conv = core.store.get(cid) if cid else None
        choice = core.tools.choices.get(request.session_hash)
        return sorted(selection(conv.settings)[1]) if conv is not None else choice.off if choice else []

    def allow(names: list[str], cid: str | None, request: gr.Request) -> tuple:
        for spec in waiting_to_start(names or [], core):
            core.tools.started.allow(spec)
        picks, off, note = tool_choices(names or [], left_out(cid, request), core)
        return note, gr.update(visible=False), picks, off

    def leave_out(off: list[str], names: list[str], cid: str | None, request: gr.Request) -> dict[str, Any]:
        core.tools.choose(request.session_hash, cid, off=off or [])
        return tool_choices(names or [], off or [], core)[0]

    def opened(cid: str | None, request: gr.Request) -> tuple:
        """Another chat on screen: its servers, and their tools for the turn (none picked)."""
        core.tools.choices.pop(request.session_hash, None)  # what the page chose went with its chat
        conv = core.store.get(cid) if cid else None
        names, off = selection(conv.settings) if conv is not None else ([], set())
        picks, left, _ = tool_choices(names, sorted(off), core)
        return gr.update(value=names), picks, left

    def answered(value: str, cid: str | None) -> None:
        call_id, _, choice = (value or "").rpartition(":")
        if not cid or not core.tools.answer(cid, call_id, choice):
            gr.Warning("that call is no longer waiting for an answer.")

    # Each page load lists mcp.json as it is now (the page was built before it changed, or with none).
    demo.load(lambda: refreshed(configured_or_none()), None, refresh_out, api_name=False)
    panel.save.click(save, [panel.pick, *fields], [*refresh_out, *fields], api_name=False)
    panel.remove.click(remove, [panel.pick], [*refresh_out, *fields], api_name=False)
    panel.pick.input(edit, [panel.pick], fields, api_name=False)
    panel.bring_in.click(bring_in, None, refresh_out, api_name=False)
    asked = [panel.consent, panel.allow, panel.turn_tool, panel.off]
    panel.on.input(chosen, [panel.on, w.conv_id], asked, api_name=False)
    panel.allow.click(allow, [panel.on, w.conv_id], asked, api_name=False)
    panel.off.input(leave_out, [panel.off, panel.on, w.conv_id], [panel.turn_tool], api_name=False)
    def picked(pick: str, request: gr.Request) -> None:
        core.tools.choose(request.session_hash, None, pick=pick or NO_TOOL)

    panel.turn_tool.input(picked, [panel.turn_tool], None, api_name=False)
    for sent in sends:  # the tool was for that turn: the next one picks again
        sent(lambda: NO_TOOL, None, [panel.turn_tool], api_name=False, queue=False)
    w.conv_id.change(opened, [w.conv_id], [panel.on, panel.turn_tool, panel.off], api_name=False)
    # queue=False: the answer it unblocks is an event still running.
    panel.approval_go.click(answered, [panel.approval, w.conv_id], None, api_name=False, queue=False,
                            js="(value, cid) => [window.localchatToolApproval || '', cid]")
