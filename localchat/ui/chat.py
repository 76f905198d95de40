"""The chat window's logic without Gradio: conversations, documents, generation, model switching."""

from __future__ import annotations

import threading
import time
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import LocalchatError
from ..ingest import Document, build_prompt, select
from ..ingest.fit import ANSWER_RESERVE, document_budget
from ..runtime.chat_template import check_prompt_size
from ..runtime.engine import Engine, Request
from ..runtime.events import Done, Failed, PrefillProgress, Stats, Stream, TextDelta
from ..runtime.sampling import SamplingParams
from . import render
from .store import Conversation, Store
from .uploads import read_upload

_TITLE_CHARS = 60
_REDRAW_S = 0.05  # at most ~20 screen updates a second while streaming
_DOCUMENTS_KEPT = 32  # extracted documents kept in memory, oldest dropped first


@dataclass(slots=True)
class Runtime:
    """The loaded engine and how to load another; the API service follows a model switch."""

    engine: Engine
    model: str
    load: Callable[[str], Engine] | None = None  # model name -> a loaded engine
    service: Any = None  # the API's LocalService, which serves the same engine
    lock: threading.Lock = field(default_factory=threading.Lock)

    def switch(self, model: str) -> None:
        """Load `model` and make it the one every chat and the API use; the old one is closed."""
        if self.load is None:
            raise LocalchatError("this window cannot switch models; restart localchat with --model.")
        with self.lock:
            if model == self.model:
                return
            engine = self.load(model)
            old, self.engine, self.model = self.engine, engine, model
            if self.service is not None:
                from ..api.local import served_name

                self.service.engine, self.service.model_name = engine, served_name(model)
        old.close()


WINDOW_MAX_TOKENS = 512  # a new chat's answer limit unless the server was given --max-tokens


@dataclass(slots=True)
class Sampling:
    """The per-conversation settings shown in the window, over the server's sampling defaults."""

    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = WINDOW_MAX_TOKENS
    base: SamplingParams = field(default_factory=SamplingParams)  # what the window does not show

    @classmethod
    def over(cls, base: SamplingParams) -> "Sampling":
        """A new chat's settings: the server's defaults (`localchat ui --temperature ...`)."""
        return cls(base.temperature, base.top_p, base.max_tokens or WINDOW_MAX_TOKENS, base)

    def params(self) -> SamplingParams:
        return dataclasses.replace(self.base, temperature=self.temperature, top_p=self.top_p,
                                   max_tokens=int(self.max_tokens))


def title_of(message: str) -> str:
    """A conversation's title: its first user message, on one line, shortened."""
    line = " ".join(message.split())
    return line if len(line) <= _TITLE_CHARS else line[: _TITLE_CHARS - 1].rstrip() + "…"


class ChatCore:
    """What the chat window does; one instance serves every browser tab."""

    def __init__(self, runtime: Runtime, store: Store) -> None:
        self.runtime = runtime
        self.store = store
        self.active: dict[str, Stream] = {}  # conversation id -> its answer in progress
        self._documents: dict[str, Document] = {}  # stored upload path -> its text (uploads never change)
        self._documents_lock = threading.Lock()

    # -- documents ------------------------------------------------------------------------

    def count_tokens(self, text: str) -> int:
        return self.runtime.engine.count_tokens(text)

    def documents(self, paths: list[str]) -> list[Document]:
        """The attached documents, extracted once each (the meter and every question read them)."""
        docs = []
        for path in paths:
            doc = self._documents.get(path)
            if doc is None:
                doc = read_upload(path)
                with self._documents_lock:
                    while len(self._documents) >= _DOCUMENTS_KEPT:
                        self._documents.pop(next(iter(self._documents)))
                    self._documents[path] = doc
            docs.append(doc)
        return docs

    def meter(self, paths: list[str], max_tokens: int) -> str:
        """The token meter: each attached document against the context, and whole or retrieved."""
        if not paths:
            return ""
        n_ctx = self.runtime.engine.n_ctx
        counts = [(doc.name, self.count_tokens(doc.text)) for doc in self.documents(paths)]
        total = sum(n for _, n in counts)
        room = n_ctx - max(max_tokens, ANSWER_RESERVE)
        share = min(total / n_ctx, 1.0)
        bar = "█" * round(share * 20) + "░" * (20 - round(share * 20))
        how = ("they fit: whole documents go into the context" if total <= room else
               "too long for the context: the passages that best match each question are used")
        names = ", ".join(f"{render.plain(name)} ({n:,} tokens)" for name, n in counts)
        return f"**Attached:** {names}\n\n`{bar}` {total:,} of {n_ctx:,} context tokens — {how}."

    # -- conversations --------------------------------------------------------------------

    def engine_messages(self, conv: Conversation) -> list[dict[str, str]]:
        """The conversation as the model sees it: a turn with documents carries them in front."""
        head = [{"role": "system", "content": conv.system_prompt}] if conv.system_prompt else []
        return head + [{"role": m.role, "content": m.stats.get("prompt", m.content)} for m in conv.messages]

    def display(self, conv: Conversation | None) -> list[dict[str, str]]:
        """The conversation as the chat window shows it."""
        if conv is None:
            return []
        shown = []
        for m in conv.messages:
            if m.role == "user":
                docs = m.stats.get("documents")
                names = ", ".join(render.plain(Path(p).name) for p in docs) if docs else ""
                shown.append({"role": "user", "content": render.inert(m.content)
                              + (f"\n\n*Attached: {names}*" if names else "")})
            else:
                note = "stopped" if m.stats.get("finish_reason") == "cancelled" else ""
                shown.append({"role": "assistant", "content": render.reply_markdown(
                    m.content, m.stats, m.stats.get("included", ""), note)})
        return shown

    def add_user_turn(self, conv_id: str | None, message: str, documents: list[str], system: str,
                      sampling: Sampling) -> str:
        """Save the user's message (with its documents fitted in) and return the conversation id."""
        check_prompt_size([message, system], self.runtime.engine.n_ctx)
        settings = {"temperature": sampling.temperature, "top_p": sampling.top_p, "max_tokens": sampling.max_tokens}
        if conv_id is None or self.store.get(conv_id) is None:
            conv_id = self.store.create(title_of(message), system, settings)
        else:
            self.store.update(conv_id, system_prompt=system, settings=settings)
        stats: dict[str, Any] = {}
        if documents:
            conv = self.store.get(conv_id)
            assert conv is not None
            history = self.runtime.engine.prompt_tokens(Request(messages=self.engine_messages(conv)
                                                                or [{"role": "user", "content": ""}]))
            budget = document_budget(self.runtime.engine.n_ctx, len(history), sampling.max_tokens)
            selection = select(message, self.documents(documents), budget, self.count_tokens)
            # The documents open the turn, so every later question shares this prefix in the KV cache.
            stats = {"prompt": build_prompt(message, selection), "included": selection.summary(),
                     "mode": selection.mode, "documents": documents}
        self.store.append(conv_id, "user", message, stats)
        return conv_id

    # -- generation -----------------------------------------------------------------------

    def answer(self, conv_id: str, sampling: Sampling) -> Iterator[str]:
        """Stream the reply to the conversation's last user turn as growing markdown; saves it at the end."""
        conv = self.store.get(conv_id)
        assert conv is not None and conv.messages and conv.messages[-1].role == "user"
        included = conv.messages[-1].stats.get("included", "")
        engine = self.runtime.engine
        stream = engine.submit(Request(messages=self.engine_messages(conv), sampling=sampling.params()))
        self.active[conv_id] = stream
        parts: list[str] = []
        stats: Stats | None = None
        finish, error = "stop", ""
        started = time.perf_counter()
        first_done, last_draw, num_deltas, t_first = -1, 0.0, 0, 0.0
        try:
            yield render.reply_markdown("", {}, included, "waiting for the model")
            for event in stream:
                now = time.perf_counter()
                if isinstance(event, TextDelta):
                    parts.append(event.text)
                    num_deltas += 1
                    t_first = t_first or now
                    if now - last_draw >= _REDRAW_S:
                        last_draw = now
                        rate = (num_deltas - 1) / (now - t_first) if now > t_first else 0.0
                        yield render.reply_markdown("".join(parts), {}, included,
                                                    f"generating, {rate:.0f} tokens/s")
                elif isinstance(event, PrefillProgress):
                    if first_done < 0:
                        first_done, started = event.done, now
                    if now - last_draw >= _REDRAW_S and event.done < event.total:
                        last_draw = now
                        yield render.reply_markdown("", {}, included, render.prefill_line(
                            event.done, event.total, started, first_done, now))
                elif isinstance(event, Stats):
                    stats = event
                elif isinstance(event, Done):
                    finish = event.finish_reason
                elif isinstance(event, Failed):
                    finish, error = "error", event.message
        finally:
            if not stream.finished:  # the browser went away mid-answer: free the sequence
                stream.cancel()
            self.active.pop(conv_id, None)
            saved = render.stats_dict(stats, engine.n_ctx) | {"finish_reason": finish}
            if included:
                saved["included"] = included
            text = "".join(parts)
            if error:
                text += f"\n\n[error: {error}]"
            self.store.append(conv_id, "assistant", text, saved)
        note = {"cancelled": "stopped", "length": "reached the max tokens limit"}.get(finish, "")
        yield render.reply_markdown(text, saved, included, note)

    def stop(self, conv_id: str | None) -> None:
        """Cancel the conversation's answer in progress, mid-prefill included."""
        stream = self.active.get(conv_id or "")
        if stream is not None:
            stream.cancel()

    def status(self) -> str:
        rt = self.runtime
        worker = rt.engine.worker
        spec = rt.engine.speculator
        speculation = type(spec.drafter).__name__ if spec is not None else "off"
        model = Path(rt.model).name if rt.model.lower().endswith(".gguf") else rt.model
        return render.status_markdown(model, worker.model_path, worker.describe(), rt.engine.n_ctx,
                                      rt.engine.placement, speculation)
