"""The chat: the conversation with its copy texts and the page script's request box, the composer under it
(composer.py), the answer buttons under that; and the handlers that answer: Send, Regenerate, an edit in place,
the ‹ › of a turn's branches and of an answer's versions, a message's Delete."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

import gradio as gr

from ...errors import LocalchatError
from ..chat import pinned, removal, render, versions
from ..chat.core import Turn
from ..chat.session import Sampling
from ..chat.shown import turn_note
from . import composer as composing
from .settings_panel import sampling_of
from .window import Window

log = logging.getLogger(__name__)

FOLLOW_S = 0.1  # how often a page that re-attached to an answer redraws it
TURN_ENDING_S = 1.0  # how long a click on a chat waits for an answer that has shown its end to end its turn
CONTINUED = ("length", "cancelled")  # how an answer that Continue takes up ended: cut at Max tokens, or stopped
EMPTY_SEND = "Nothing was sent: the message box is empty. Type a question, then Send."


@dataclass(slots=True)
class ChatView:
    chatbot: gr.Chatbot
    copy_texts: gr.Textbox
    action: gr.Textbox
    action_go: gr.Button
    compose: composing.Composer
    regenerate: gr.Button
    edit: gr.Button
    carry_on: gr.Button  # Continue: an answer cut at Max tokens goes on
    settings: gr.Button


def build() -> ChatView:
    """The chat's components, in page order (inside the Blocks being built)."""
    chatbot = gr.Chatbot(elem_id="chat", label="localchat", sanitize_html=True, allow_tags=False,
                         height="65vh", buttons=["copy"], feedback_options=None, editable="user",
                         group_consecutive_messages=False,  # a bubble, a copy button, an edit each
                         placeholder="Ask anything, or attach documents and ask about them.")
    copy_texts = gr.Textbox(value="[]", elem_id="sources", elem_classes="lc-hidden", show_label=False,
                            interactive=False, container=False)
    # The page script's requests that carry a value (a chip's ×, a branch arrow): it puts the request here.
    action = gr.Textbox(elem_id="action", elem_classes="lc-hidden", show_label=False, container=False)
    action_go = gr.Button("Act", elem_id="action-go", elem_classes="lc-hidden")
    compose = composing.build_composer()
    with gr.Row(elem_id="answer-buttons"):
        # Off until a chat is open (layout.py turns them on): with none there is nothing they could act on.
        regen_btn = gr.Button("Regenerate", size="sm", elem_id="regenerate", interactive=False)
        edit_btn = gr.Button("Edit last message", size="sm", elem_id="edit", interactive=False)
        continue_btn = gr.Button("Continue", size="sm", elem_id="continue", interactive=False)
        settings_btn = gr.Button("Settings", size="sm", elem_id="open-settings")
    return ChatView(chatbot, copy_texts, action, action_go, compose, regen_btn, edit_btn,
                    continue_btn, settings_btn)


class Replies:
    """The chat's handlers. An expected error is a warning toast and the outputs stay as they were: a raised
    error would also paint every output of the event with a red "Error" badge."""

    def __init__(self, w: Window) -> None:
        self.w, self.core, self.store = w, w.core, w.store

    def respond(self, request: gr.Request, text: str, cid: str | None, docs: list[str], sys_prompt: str,
                *values: float) -> Iterator[tuple]:
        core, underway = self.core, self.w.underway
        text, sys_prompt = text or "", sys_prompt or ""  # an untouched textbox may send None
        if not text.strip():  # said, not dropped silently: a Send that does nothing reads as one lost
            gr.Warning(EMPTY_SEND + (" The attached documents go with it." if docs else ""))
            yield (gr.skip(),) * 8
            return
        sampling = sampling_of(values, self.w.defaults)
        try:
            cid = core.open_conversation(cid, text, sys_prompt, sampling)
        except LocalchatError as exc:
            gr.Warning(str(exc))
            kept = composing.shown(core, docs or [], sampling.max_tokens, cid) + composing.refusal(exc)
            yield *(gr.skip(),) * 4, kept, gr.skip(), gr.skip(), gr.skip()
            return
        self.w.opened(request, cid)  # a Send comes from the chat on screen
        core.tools.bind(request.session_hash, cid)  # the page's MCP servers and its tool for this turn go with it
        # The question takes over what the read-ahead has read so far, and reads the rest itself.
        self.w.pre_reader.stop(request.session_hash)
        underway.queue(cid, text, docs or [], sys_prompt, sampling)
        # The box is cleared once, now; the updates that stream the answer leave it alone. Sent mid-answer,
        # the message shows at once under the answer as waiting, with its Cancel.
        yield (self.w.view(cid)[0] if core.busy(cid) else gr.skip()), "", cid, [], "", gr.skip(), gr.skip(), gr.skip()
        with core.turn(cid) as turn:  # a message sent mid-answer waits here for that answer to end
            message = underway.next_message(cid)  # the oldest still waiting: messages go in the order sent
            if message is None:  # cancelled while it waited: its Cancel has shown the chat without it
                # The event's last update is shown again when it ends: not the chat as it was at Send.
                yield (gr.skip(),) * 8
                return
            try:
                core.add_user_turn(cid, message.text, message.documents, message.system, message.sampling)
            except LocalchatError as exc:
                gr.Warning(str(exc))
                yield (self.w.view(cid)[0], message.text, cid, message.documents,
                       composing.shown(core, message.documents, message.sampling.max_tokens, cid)
                       + composing.refusal(exc), gr.skip(), gr.skip(), gr.skip())
                return
            yield from self.stream_reply(request, cid, message.sampling, turn=turn)

    def stream_reply(self, request: gr.Request, cid: str, sampling: Sampling,
                     earlier: list | None = None, turn: Turn | None = None, begun: str = "") -> Iterator[tuple]:
        """Called with the conversation's `turn` held; `earlier`: the answers a regenerate keeps. While the
        page shows another chat, the answer goes on and is saved, but only the chat list (which it
        reorders) and the status change there. When the page goes away (a reload, a closed tab) the answer
        goes on too, on a thread of its own, and a page that opens the chat follows it (`follow`)."""
        core, w = self.core, self.w
        shown = core.display(self.store.get(cid))
        answer = core.answer(cid, sampling, earlier or None, begun)
        handed = False
        try:
            for reply in answer:
                w.underway.show_answer(cid, reply)  # what any other update of this chat shows meanwhile
                if w.shows(request, cid):
                    yield (shown + w.tail(cid), gr.skip(), cid, gr.skip(), gr.skip(), w.conversations(cid, request),
                           gr.skip(), gr.skip())
        except GeneratorExit:  # Gradio closes the event of a page that went away
            handed = turn is not None
            if handed:
                turn.hand_over()
                threading.Thread(target=self.finish_unseen, args=(cid, answer, turn), daemon=True,
                                 name="localchat-unseen-answer").start()
            raise
        except LocalchatError as exc:  # refused by the engine (a regenerate with more max tokens, say)
            gr.Warning(str(exc))
        finally:
            if not handed:
                w.underway.end_answer(cid)
        if not w.shows(request, cid):
            other = w.showing.get(request.session_hash)
            yield *(gr.skip(),) * 5, w.conversations(other, request), core.status(), gr.skip()
            return
        # The saved conversation, numbers included, is the final word on what was said.
        chat, copy = w.view(cid)
        yield chat, gr.skip(), cid, gr.skip(), gr.skip(), w.conversations(cid, request), core.status(), copy

    def finish_unseen(self, cid: str, answer: Iterator[str], turn: Turn) -> None:
        """The rest of an answer whose page went away: shown to any page that opens the chat, then saved (by
        `answer` itself); the chat's turn ends with it, so a message sent meanwhile waits for it as ever."""
        try:
            for reply in answer:
                self.w.underway.show_answer(cid, reply)
        except LocalchatError as exc:
            log.warning("an answer whose page had gone away failed: %s", exc)
        finally:
            self.w.underway.end_answer(cid)
            turn.end()

    def follow(self, cid: str | None, request: gr.Request) -> Iterator[tuple]:
        """A page opened on a chat that is answering (a reload mid-answer): the answer as it goes, to its end."""
        if not cid or not self.w.underway.answering(cid):
            yield gr.skip(), gr.skip()  # the chat as the page load drew it (an event that yields nothing empties it)
            return
        while self.w.underway.answering(cid) and self.w.shows(request, cid):
            yield self.w.view(cid)
            time.sleep(FOLLOW_S)
        if self.w.shows(request, cid):
            yield self.w.view(cid)  # the saved answer, numbers included

    def regenerate(self, request: gr.Request, cid: str | None, *values: float) -> Iterator[tuple]:
        conv = self.store.get(cid) if cid else None
        if conv is None or not any(m.role == "user" for m in conv.messages):
            gr.Warning("nothing to regenerate yet; send a message first.")
            yield (gr.skip(),) * 8
            return
        with self.core.turn(conv.id) as turn:
            kept = versions.drop_reply(self.store, conv.id)  # ‹ › shows them again
            self.w.opened(request, conv.id)
            yield from self.stream_reply(request, conv.id, sampling_of(values, self.w.defaults), kept, turn)

    def carry_on(self, request: gr.Request, cid: str | None, *values: float) -> Iterator[tuple]:
        """Continue: the last answer, cut at Max tokens or stopped, goes on from where it ended (kept in its place;
        Continue is on under any answer, so a stopped one goes on too rather than being refused)."""
        conv = self.store.get(cid) if cid else None
        last = conv.messages[-1] if conv is not None and conv.messages else None
        if last is None or last.role != "assistant" or last.stats.get("finish_reason") not in CONTINUED \
                or not last.content.strip():
            gr.Warning("only an answer cut at Max tokens or stopped, with some text, can be continued; Regenerate "
                       "answers again.")
            yield (gr.skip(),) * 8
            return
        with self.core.turn(conv.id) as turn:
            kept = versions.drop_reply(self.store, conv.id)
            shown = min(int(last.stats.get("version", len(kept) - 1)), len(kept) - 1)
            self.w.opened(request, conv.id)
            yield from self.stream_reply(request, conv.id, sampling_of(values, self.w.defaults),
                                         kept[:shown] + kept[shown + 1:], turn, begun=last.content)
            now = self.store.get(conv.id)
            if now is not None and now.messages and now.messages[-1].role == "user":  # refused: no room left
                self.store.append(conv.id, "assistant", last.content, last.stats)  # the cut answer stays
                yield self.w.view(conv.id)[0], *(gr.skip(),) * 6, self.w.view(conv.id)[1]

    def edit_message(self, edit: gr.EditData, request: gr.Request, cid: str | None, sys_prompt: str,
                     *values: Any) -> Iterator[tuple]:
        """A user message edited in place: the chat continues from it; what followed stays a branch (‹ 1/2 ›)."""
        core, view = self.core, self.w.view
        index = edit.index if isinstance(edit.index, int) else edit.index[0]
        text = edit.value if isinstance(edit.value, str) else str(edit.value)
        conv = self.store.get(cid) if cid else None
        if conv is None or not 0 <= index < len(conv.messages) or conv.messages[index].role != "user":
            yield view(cid)[0], *(gr.skip(),) * 6, view(cid)[1]
            return
        note = turn_note(index, conv.messages[index])  # the edit box starts with what the chat shows
        text = render.from_inert(text[: -len(note)] if note and text.endswith(note) else text)
        if not text.strip():  # emptied: nothing to ask, the chat stays as it was
            yield view(cid)[0], *(gr.skip(),) * 6, view(cid)[1]
            return
        sampling = sampling_of(values, self.w.defaults)
        core.stop(cid)
        with core.turn(conv.id) as turn:
            try:
                core.edit_turn(conv.id, index, text, sys_prompt or "", sampling)
            except LocalchatError as exc:
                gr.Warning(str(exc))
                yield *view(conv.id)[:1], *(gr.skip(),) * 6, view(conv.id)[1]
                return
            self.w.opened(request, conv.id)
            yield from self.stream_reply(request, conv.id, sampling, turn=turn)

    def act(self, request: str, cid: str | None, draft: str, docs: list[str], mx: float, page: gr.Request) -> tuple:
        """A request of the page script: "remove:I" (a chip's ×), "branch:I:STEP" (a user turn's ‹ or ›),
        "version:I:STEP" (an answer's ‹ or ›), "delete-turn:I" and "delete-version:I" (a message's Delete,
        confirmed), "unpin" (a refusal's Leave out), "cancel:N" (a waiting message's Cancel). Returns the chat, the copy texts, the message box, the
        attached files, their chips and meter, and the chat list."""
        core = self.core
        kind, *numbers = (request or "").split(":")
        try:
            args = [int(n) for n in numbers]  # from the client: numbers or nothing
        except ValueError:
            return (gr.skip(),) * 6
        if kind == "remove" and len(args) == 1:
            docs = [d for i, d in enumerate(docs or []) if i != args[0]]
            return gr.skip(), gr.skip(), gr.skip(), docs, composing.shown(core, docs, mx, cid), gr.skip()
        changes = {"branch": "switch branches", "version": "switch answers", "delete-turn": "delete a message",
                   "delete-version": "delete an answer"}
        if kind in changes and len(args) == (2 if kind in ("branch", "version") else 1) and cid:
            # An answer's last update (its numbers) is shown just before its turn ends: a click on what that
            # update drew waits that moment out; one while the answer is still written is refused, since what
            # it would change may be the turn being answered.
            with core.turn(cid, wait_s=TURN_ENDING_S) as turn:
                if turn is None:
                    gr.Warning(f"an answer is being written in this chat; stop it (Stop or Esc) to {changes[kind]}.")
                    return (gr.skip(),) * 6
                if kind == "branch":
                    core.show_branch(cid, args[0], max(min(args[1], 1), -1))
                elif kind == "version":
                    versions.show_version(self.store, cid, args[0], max(min(args[1], 1), -1))
                elif kind == "delete-turn":
                    removal.remove_turn(self.store, cid, args[0])
                else:
                    removal.remove_version(self.store, cid, args[0])
            # A first turn's branch or removal names the chat.
            return *self.w.view(cid), gr.skip(), gr.skip(), gr.skip(), self.w.conversations(cid, page)
        if kind == "unpin" and not args and cid:  # the refusal's Leave out: the page sends again once it is gone
            pinned.unpin(self.store, cid)
            return *(gr.skip(),) * 4, composing.shown(core, docs, mx, cid), gr.skip()
        if kind == "cancel" and len(args) == 1 and cid:
            return self.cancel(cid, args[0], draft, docs)
        return (gr.skip(),) * 6

    def cancel(self, cid: str, number: int, draft: str, docs: list[str]) -> tuple:
        """A waiting message taken back: it leaves the chat and is never sent. An empty composer gets it back
        to be edited and sent again; one holding something else keeps that."""
        message = self.w.underway.cancel(cid, number)
        chat = self.w.view(cid)[0]
        if message is None or (draft or "").strip() or docs:
            return chat, *(gr.skip(),) * 5
        return (chat, gr.skip(), message.text, message.documents,
                composing.shown(self.core, message.documents, message.sampling.max_tokens, cid), gr.skip())

    def edit_last(self, cid: str | None) -> None:
        """The page opened the last user message's own edit box (the pencil's: an edit forks the chat
        and the old branch stays); here only the toast when there is none."""
        conv = self.store.get(cid) if cid else None
        if conv is None or not any(m.role == "user" for m in conv.messages):
            gr.Warning("there is no message to edit yet.")


def wire(w: Window, view: ChatView) -> Replies:
    """The chat's events and the composer's; returns the handlers (the page load follows an answer with them)."""
    replies = Replies(w)
    conv_id, settings_inputs, sliders = w.conv_id, w.panel.inputs, w.panel.controls
    # The engine batches concurrent chats, so several tabs may stream at once; within one chat a
    # message sent mid-answer is taken at once ("multiple") and waits for its turn in ChatCore.
    for trigger in (view.compose.send.click, w.message.submit):
        trigger(replies.respond, [w.message, conv_id, w.pending, *settings_inputs], w.reply_outputs,
                api_name="send" if trigger == view.compose.send.click else False, concurrency_limit=8,
                trigger_mode="multiple")
    composing.wire(view.compose, w)
    # "multiple": each click answers again (after the answer before it), so ten quick clicks keep ten versions.
    view.regenerate.click(replies.regenerate, [conv_id, *sliders], w.reply_outputs,
                          api_name=False, concurrency_limit=8, trigger_mode="multiple")
    view.carry_on.click(replies.carry_on, [conv_id, *sliders], w.reply_outputs, api_name=False, concurrency_limit=8)
    # The last pencil shown: a waiting message's are hidden (page.py), it is not stored to be edited yet.
    view.edit.click(replies.edit_last, [conv_id], None, api_name=False,
                    js="(cid) => { const pencils = [...document.querySelectorAll(\"#chat button[aria-label='Edit']\")]"
                       ".filter((pencil) => pencil.offsetParent !== null);"
                       " if (pencils.length) pencils[pencils.length - 1].click(); return [cid]; }")
    view.action_go.click(replies.act, [view.action, conv_id, w.message, w.pending, w.panel.control("max_tokens")],
                         [*w.chat_outputs, w.message, w.pending, w.meter, w.convs], api_name=False,
                         js="(request, ...rest) => [window.localchatAction || '', ...rest]")
    view.settings.click(None, None, None, js="() => localchatToggleSettings()", api_name=False)
    view.chatbot.edit(replies.edit_message, [conv_id, *settings_inputs], w.reply_outputs, api_name=False,
                      concurrency_limit=8)
    return replies
