"""An answer's tool calls as the window shows and keeps them: each call a card (server, tool, arguments, result
or error, time, how it was approved), kept in the answer's stats as `tool_steps`, in the order the model wrote
them: each step its thinking, its text, then its calls. Everything a card shows is escaped text, never markup: a
tool's result is model input, not page content. An imported card is checked field by field and is never run."""

from __future__ import annotations

import html
from typing import Any

MAX_STEPS = 64
MAX_CARDS = 64  # in one step
MAX_FIELD = 200_000  # characters of one card's arguments or result kept from a file

# A card's state: asking and running are shown while the answer is written; the others are how a call ended.
ASKING, RUNNING = "asking", "running"
DONE = ("done", "failed", "denied", "stopped", "not run")
APPROVALS = ("once", "always", "trusted", "denied", "")  # how the call came to run (or not)
CHOICES = {"once": "Allow once", "always": "Always for this tool", "deny": "Deny"}


def new_card(call_id: str, server: str, tool: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "server": server, "tool": tool, "arguments": arguments, "state": ASKING,
            "approval": "", "result": "", "seconds": 0.0}


def _text_html(text: str) -> str:
    # One Markdown line (a blank line would end the HTML block), the text's line breaks kept as <br>.
    return html.escape(text).replace("\n", "<br>")


def _headline(card: dict[str, Any]) -> str:
    state = card["state"]
    said = {ASKING: "waiting for your approval", RUNNING: "running…", "done": "done", "failed": "failed",
            "denied": "denied", "stopped": "stopped", "not run": "not run"}.get(state, state)
    took = f", {card['seconds']:.1f} s" if state in ("done", "failed", "stopped") and card.get("seconds") else ""
    how = {"always": " (always allowed)", "trusted": " (trusted in mcp.json)"}.get(card.get("approval", ""), "")
    return f"{card['server']} · {card['tool']} — {said}{took}{how}"


def card_html(card: dict[str, Any]) -> str:
    """A call as a block that opens: open while it waits or runs, closed when done; with Allow once, Always for
    this tool and Deny while it waits (the page script sends the click, tools_panel.py answers it)."""
    now = card["state"] in (ASKING, RUNNING)
    body = f'<div class="lc-call-label">arguments</div><div class="lc-call-text">{_text_html(card["arguments"])}</div>'
    if card.get("result"):
        label = "error" if card["state"] == "failed" else "result"
        body += f'<div class="lc-call-label">{label}</div><div class="lc-call-text">{_text_html(card["result"])}</div>'
    block = (f'<details class="lc-call lc-call-{card["state"].replace(" ", "-")}"{" open" if now else ""}>'
             f'<summary>{html.escape(_headline(card))}</summary>{body}</details>')
    if card["state"] == ASKING:
        value = html.escape(card["id"], quote=True)
        block += '<div class="lc-approval">' + "".join(
            f'<button type="button" class="lc-approve lc-approve-{choice}" value="{value}:{choice}" '
            f'title="{label}">{label}</button>' for choice, label in CHOICES.items()) + "</div>"
    return block


def steps_markdown(stats: dict[str, Any]) -> list[str]:
    """The steps as a Markdown export shows them: each turn's text, then each call closed, its arguments and
    result inside as text (escaped: they are the model's and a server's, not markup)."""
    lines: list[str] = []
    for step in steps_of(stats):
        lines += [step["text"], ""] if step.get("text", "").strip() else []
        for card in step.get("cards", []):
            inside = f"arguments: {card['arguments']}" + (f"\n\n{card['result']}" if card.get("result") else "")
            lines += [f"<details><summary>{html.escape(_headline(card))}</summary>\n\n<pre>{html.escape(inside)}</pre>"
                      "\n\n</details>", ""]
    return lines


def notes_of(stats: dict[str, Any]) -> list[str]:
    """Why some of the chat's servers were not offered to the model in this answer ([] when all were)."""
    notes = stats.get("tool_notes")
    return [n for n in notes if isinstance(n, str)][:MAX_STEPS] if isinstance(notes, list) else []


def steps_of(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """The answer's tool steps ([] for an answer without calls)."""
    steps = stats.get("tool_steps")
    return steps if isinstance(steps, list) else []


def _kept_card(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    texts = ("id", "server", "tool", "arguments", "result")
    if not all(isinstance(value.get(k, ""), str) and len(value.get(k, "")) <= MAX_FIELD for k in texts):
        return None
    seconds = value.get("seconds", 0.0)
    card = {k: value.get(k, "") for k in texts} | {
        "seconds": float(seconds) if type(seconds) in (int, float) and 0 <= seconds < 1e9 else 0.0,
        "approval": value.get("approval") if value.get("approval") in APPROVALS else "",
        # A call that was waiting or running when the file was made did not run, and nothing here runs it.
        "state": value.get("state") if value.get("state") in DONE else "not run"}
    return card


def checked_steps(value: Any) -> list[dict[str, Any]] | None:
    """An imported answer's tool steps, each field of the type the window reads, or None if they are not that."""
    if not isinstance(value, list) or not value or len(value) > MAX_STEPS:
        return None
    steps = []
    for step in value:
        if not isinstance(step, dict) or not isinstance(step.get("cards", []), list) \
                or len(step.get("cards", [])) > MAX_CARDS:
            return None
        thinking, text = step.get("thinking", ""), step.get("text", "")
        cards = [_kept_card(c) for c in step.get("cards", [])]
        if not isinstance(thinking, str) or not isinstance(text, str) or any(c is None for c in cards):
            return None
        steps.append({"thinking": thinking, "text": text, "cards": cards})
    return steps
