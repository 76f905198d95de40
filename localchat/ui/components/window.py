"""What the window's parts share: the chat logic with a new chat's settings, the components more than one part
reads or writes, and the helpers they all use (the chat list, the chat shown, a chat opened)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from ..chat.core import ChatCore
from ..chat.pre_read import PreReader
from ..chat.presets import Presets
from ..chat.session import SHOWN_SETTINGS, Sampling, max_answer_tokens
from ..chat.shown import turn_note
from ..chat.store import Message, Store
from ..chat.underway import Underway, Waiting
from .models_panel import model_choices
from .settings_panel import SettingsPanel, starting

INTERRUPTED = "No answer: it was interrupted (localchat stopped while answering). Regenerate answers it."


def when(timestamp: float, now: float | None = None) -> str:
    """A chat's date in the list: the time today, the day this year, the date before."""
    moment, today = time.localtime(timestamp), time.localtime(now)
    if moment[:3] == today[:3]:
        return time.strftime("%H:%M", moment)
    return time.strftime("%b %d" if moment.tm_year == today.tm_year else "%Y-%m-%d", moment)


def sources(conv: Any) -> str:
    """Each shown message's own text, for the copy buttons (the page script reads it)."""
    return json.dumps([m.content for m in conv.messages] if conv is not None else [])


def conversations(store: Store, selected: str | None = None, query: str = "") -> dict[str, Any]:
    """The chat list: every chat, or those `query` finds; `selected` is the one chosen."""
    found = store.search(query.strip()) if query and query.strip() else store.list()
    return gr.update(choices=[(f"{c.title} · {when(c.updated)}", c.id) for c in found], value=selected)


@dataclass(slots=True)
class Window:
    core: ChatCore
    defaults: Sampling  # with system_prompt: a new conversation's settings
    system_prompt: str
    presets: Presets
    pre_reader: PreReader
    conv_id: gr.State
    pending: gr.State  # stored paths of the documents attached to the next message
    drafts: gr.State  # conversation id ("" for a new chat) -> its unsent message
    convs: gr.Radio
    model: gr.Dropdown
    status: gr.Markdown
    chatbot: gr.Chatbot
    copy_texts: gr.Textbox
    message: gr.Textbox
    meter: gr.HTML  # the attached files' chips and the context meter
    panel: SettingsPanel
    underway: Underway = field(default_factory=Underway)  # each chat's answer streaming and messages waiting
    # Each page's chat on screen (by Gradio's session): an answer streaming for another chat of that page
    # leaves its view alone, where it would draw that chat over the one the user opened.
    showing: dict[str, str | None] = field(default_factory=dict)
    # Each page's chat search as last typed (by Gradio's session): every update of its chat list (a new
    # chat, an answer reordering it, a rename) lists what that search finds, not every chat.
    searches: dict[str, str] = field(default_factory=dict)

    def opened(self, request: gr.Request | None, cid: str | None) -> None:
        """The page of `request` now shows chat `cid` (None: a new chat)."""
        if request is not None and request.session_hash:
            self.showing[request.session_hash] = cid

    def shows(self, request: gr.Request | None, cid: str | None) -> bool:
        """Whether the page of `request` shows chat `cid` (a page not heard of yet: yes)."""
        if request is None or not request.session_hash:
            return True
        return self.showing.get(request.session_hash, cid) == cid

    @property
    def store(self) -> Store:
        return self.core.store

    @property
    def chat_outputs(self) -> list[Any]:
        return [self.chatbot, self.copy_texts]

    @property
    def reply_outputs(self) -> list[Any]:
        """What an answer's handlers write, in their tuples' order."""
        return [self.chatbot, self.message, self.conv_id, self.pending, self.meter, self.convs, self.status,
                self.copy_texts]

    @property
    def chat_state(self) -> list[Any]:
        """What opening a chat writes, in `load`'s order."""
        return [*self.chat_outputs, self.conv_id, *self.panel.inputs, self.pending, self.meter]

    def searched(self, request: gr.Request | None, query: str) -> None:
        """The page of `request` now searches its chats for `query` ("" lists them all)."""
        if request is not None and request.session_hash:
            self.searches[request.session_hash] = (query or "").strip()

    def conversations(self, selected: str | None = None, request: gr.Request | None = None) -> dict[str, Any]:
        """The chat list as the page of `request` shows it: what its search finds (without a request, all)."""
        query = self.searches.get(request.session_hash, "") if request is not None and request.session_hash else ""
        return conversations(self.store, selected, query)

    def view(self, cid: str | None) -> tuple[list[dict[str, str]], str]:
        """The chat and its copy texts: what is stored, then what is under way (`tail`)."""
        conv = self.store.get(cid) if cid else None
        return self.core.display(conv) + self.interrupted(conv) + self.tail(cid), sources(conv)

    def interrupted(self, conv: Any) -> list[dict[str, str]]:
        """A chat whose last message has no answer and none coming: the server stopped while it answered (an answer
        is kept when it ends). Said, with what answers it, rather than left looking cut off."""
        if conv is None or not conv.messages or conv.messages[-1].role != "user" or self.core.busy(conv.id) \
                or self.underway.answering(conv.id):
            return []
        return [{"role": "assistant", "content": f"*{INTERRUPTED}*"}]

    def tail(self, cid: str | None) -> list[dict[str, str]]:
        """The answer streaming in chat `cid`, then its messages waiting, each with its Cancel."""
        return self.underway.tail(cid, self.waiting_note)

    def waiting_note(self, message: Waiting) -> str:
        """What a waiting message's bubble notes under it, as a sent one's does (its attached documents)."""
        return turn_note(-1, Message("user", message.text, {"documents": message.documents}))

    def load(self, cid: str | None) -> tuple:
        """The chat `cid` opened (`chat_state`'s values)."""
        conv = self.store.get(cid) if cid else None
        if conv is None:  # a new chat: the default preset's settings, or the server's
            system, *values = starting(self.presets, self.defaults, self.system_prompt)
            return [], "[]", None, system, *self.controls(values), [], ""
        s = conv.settings
        return (*self.view(conv.id), conv.id, conv.system_prompt,
                *self.controls([s.get(name, getattr(self.defaults, name)) for name in SHOWN_SETTINGS]), [], "")

    def controls(self, values: list[Any]) -> list[Any]:
        """A chat's settings as the drawer's controls take them: Max tokens within the loaded context, its
        slider's end moved with the context (a chat kept from a longer context asked for more than it holds)."""
        room = max_answer_tokens(self.core.runtime.engine.n_ctx)
        at = SHOWN_SETTINGS.index("max_tokens")
        wanted = values[at] if isinstance(values[at], (int, float)) else room
        return [*values[:at], gr.update(maximum=room, value=min(wanted, room)), *values[at + 1:]]

    def new_chat(self, request: gr.Request | None = None) -> tuple:
        """A new chat opened, then the chat list (as the page's search finds it) with none chosen."""
        return *self.load(None), self.conversations(None, request)

    def picker(self) -> dict[str, Any]:
        """The model picker: the models found here, the loaded one chosen."""
        runtime = self.core.runtime
        return gr.update(choices=model_choices(runtime.model, earlier=runtime.earlier), value=runtime.model)
