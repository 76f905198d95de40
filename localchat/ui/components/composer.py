"""The composer: the message box with its attach, Send and Stop buttons, and above it the attached files as
removable chips with their token counts and the context meter (one component: whatever changes the attached
files shows both); and their events but Send's (chat_view.py answers it)."""

from __future__ import annotations

import functools
import html
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import gradio as gr

from ...errors import LocalchatError, PinnedDocumentsError
from ..chat.core import ChatCore
from ..documents.uploads import ACCEPTED, discard_received, named_only, store_upload
from .window import Window


@dataclass(slots=True)
class Composer:
    attached: gr.HTML  # the chips and the meter
    reading: gr.Markdown  # "reading the document… n/N" while the attached documents are read ahead
    message: gr.Textbox
    attach: gr.UploadButton
    send: gr.Button
    stop: gr.Button


def build_composer() -> Composer:
    """The composer's components, in page order (inside the Blocks being built)."""
    attached = gr.HTML("", elem_id="attachments", padding=False)
    reading = gr.Markdown("", elem_id="reading")
    with gr.Row(equal_height=True, elem_id="composer"):
        attach = gr.UploadButton("Attach", file_count="multiple", file_types=ACCEPTED, scale=0, min_width=70,
                                 elem_id="attach", variant="secondary")
        # A narrow minimum: at phone width the box, Attach, Send and Stop still share one row.
        message = gr.Textbox(placeholder="Message (Enter sends, Esc stops)", show_label=False, scale=8, lines=1,
                             max_lines=8, min_width=110, elem_id="message")
        send = gr.Button("Send", variant="primary", scale=1, min_width=80, elem_id="send")
        stop = gr.Button("Stop", variant="stop", scale=1, min_width=80, elem_id="stop")
    return Composer(attached, reading, message, attach, send, stop)


def chips(counts: list[tuple[str, int]]) -> str:
    """One chip per attached file: its name, its tokens, and a remove button the page script handles."""
    shown = [f'<span class="lc-chip" title="{html.escape(name)}"><span class="lc-chip-name">{html.escape(name)}'
             f'</span> <span class="lc-chip-tokens">{n:,} tokens</span><button type="button" class="lc-chip-remove" '
             f'data-index="{i}" aria-label="Remove {html.escape(name)}">×</button></span>'
             for i, (name, n) in enumerate(counts)]
    return f'<div class="lc-chips">{"".join(shown)}</div>'


def shown(core: ChatCore, docs: list[str], max_tokens: float, conv_id: str | None) -> str:
    """The chips and the meter of the attached files ("" without any)."""
    if not docs:
        return ""
    meter = html.escape(core.meter(docs, int(max_tokens), conv_id))
    return chips(core.attachment_counts(docs)) + f'<div id="meter" class="lc-meter">{meter}</div>'


def refusal(error: Exception) -> str:
    """A message the window refused to send, and why, kept under the message box until the next change (a
    toast fades while the user is still reading the chat); with its way out where the window has one: the
    documents an earlier turn read left out (the page script sends again once they are)."""
    fix = ('<button type="button" id="leave-out" class="lc-refusal-fix">Leave out and send</button>'
           if isinstance(error, PinnedDocumentsError) else "")
    return f'<div id="refusal" class="lc-refusal" role="alert">Not sent: {html.escape(str(error))}{fix}</div>'


def attach(core: ChatCore, uploaded: list[str] | None, docs: list[str], max_tokens: float,
           conv_id: str | None) -> tuple[list[str], str, None]:
    """Files from the attach button (or dropped on the chat), stored and checked; (the attached files, their
    chips and meter, an emptied attach button)."""
    docs = list(docs)
    for path in uploaded or []:
        stored = None
        try:
            stored = store_upload(path)  # Gradio took it only from its upload folder (web.py)
            core.documents([str(stored)])  # type and content check now, not at send time
            docs.append(str(stored))
        except LocalchatError as exc:
            said = named_only(str(exc), path, Path(path).name)
            gr.Warning(named_only(said, stored, stored.name) if stored is not None else said)
        finally:
            discard_received(path)
    return docs, shown(core, docs, max_tokens, conv_id), None


def wire(compose: Composer, w: Window) -> None:
    """Attach, Stop, and the read-ahead of the attached documents."""
    core, pre_reader, max_tokens = w.core, w.pre_reader, w.panel.control("max_tokens")

    def read_ahead(docs: list[str], cid: str | None, sys_prompt: str, tokens: float,
                   request: gr.Request) -> Iterator[str]:
        """Read the attached documents before the question (pre_read.py); a newer change ends it."""
        stream = pre_reader.start(request.session_hash, cid, docs or [], sys_prompt or "", int(tokens))
        if stream is None:
            yield ""
            return
        yield from pre_reader.follow(request.session_hash, stream)

    compose.stop.click(core.stop, [w.conv_id], None, queue=False, api_name=False)
    compose.attach.upload(functools.partial(attach, core), [compose.attach, w.pending, max_tokens, w.conv_id],
                          [w.pending, compose.attached, compose.attach], api_name=False)
    # "multiple": a detach or a chat switch runs at once and ends the read-ahead in flight.
    w.pending.change(read_ahead, [w.pending, w.conv_id, w.panel.system, max_tokens], [compose.reading],
                     api_name=False, trigger_mode="multiple", concurrency_limit=8, show_progress="hidden")
