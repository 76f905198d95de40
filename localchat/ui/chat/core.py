"""The chat window's logic without Gradio: conversations, documents, generation, model switching (ChatCore is
the one object every window handler calls; what it runs on, Runtime and Sampling, is in session.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from ...errors import ContextOverflowError, LocalchatError, PinnedDocumentsError
from ...ingest import Document, Selection, VectorStore, build_prompt, document_tokens, select
from ...ingest.fit import document_budget, passage_budget
from ...runners.embedding import shared_models
from ...runtime.backends import residence
from ...runtime.engine import Request
from ...runtime.events import Done, Failed, PrefillProgress, Stats, Stream, TextDelta
from ...runtime.overflow import Fitted, fit, without
from ...runtime.templates.chat_template import check_prompt_size
from ..documents.uploads import read_upload
from . import pinned, render, shown, versions
from .chat_tools import ChatTools
from .session import Runtime, Sampling, max_answer_tokens, settings_of
from .store import Conversation, Store
from .thinking_view import Budgeted, ThinkingView, switches, with_thinking
from .tool_loop import ToolStep, tool_run

log = logging.getLogger(__name__)

_TITLE_CHARS = 60
_REDRAW_S = 0.05  # at most ~20 screen updates a second while streaming
_DOCUMENTS_KEPT = 32  # extracted documents kept in memory, oldest dropped first


def recent_questions(conv: Conversation | None, turns: int = 2) -> str:
    """The chat's last user questions, as they were typed: what a follow-up's "it" may stand for."""
    if conv is None:
        return ""
    asked = [m.content for m in conv.messages if m.role == "user"]
    return "\n".join(asked[-turns:])


def title_of(message: str) -> str:
    """A conversation's title: its first user message, on one line, shortened."""
    line = " ".join(message.split())
    return line if len(line) <= _TITLE_CHARS else line[: _TITLE_CHARS - 1].rstrip() + "…"


class Turn:
    """A conversation's turn, held (ChatCore.turn)."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock, self.handed_over = lock, False

    def hand_over(self) -> None:
        """Whoever finishes the answer ends the turn (`end`), not the handler that took it."""
        self.handed_over = True

    def end(self) -> None:
        self._lock.release()


class ChatCore:
    """What the chat window does; one instance serves every browser tab."""

    def __init__(self, runtime: Runtime, store: Store) -> None:
        self.runtime = runtime
        self.store = store
        self.active: dict[str, Stream | Budgeted] = {}  # conversation id -> its answer in progress
        self._documents: dict[str, Document] = {}  # stored upload path -> its text (uploads never change)
        self._documents_lock = threading.Lock()
        self._turns: dict[str, threading.Lock] = {}  # conversation id -> held while a turn is answered
        self._turns_lock = threading.Lock()
        # Chunk vectors beside the chats: a document is embedded once, whatever is asked of it.
        self.vectors = VectorStore(store.path.parent / "vectors.sqlite3")
        self.tools = ChatTools(store)  # the chats' MCP tools and the approvals their calls wait for

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

    def attachment_counts(self, paths: list[str]) -> list[tuple[str, int]]:
        """Each attached document's name and its length in tokens as the prompt holds it (the chips above
        the message box; the meter and the reply's "whole (N tokens)" count the same)."""
        return [(doc.name, document_tokens(doc, self.count_tokens)) for doc in self.documents(paths)]

    def meter(self, paths: list[str], max_tokens: int, conv_id: str | None = None) -> str:
        """The token meter: the attached documents against the context, and whole or retrieved.

        "Whole" is decided the way the next message decides it (the same budget, the same
        selection), so the meter never promises what the reply then does not do.
        """
        if not paths:
            return ""
        n_ctx = self.runtime.engine.n_ctx
        docs = self.documents(paths)
        total = sum(n for _, n in self.attachment_counts(paths))
        conv = self.store.get(conv_id) if conv_id else None
        whole = self.fit(docs, "", conv, max_tokens).mode == "whole"
        share = min(total / n_ctx, 1.0)
        bar = "█" * round(share * 20) + "░" * (20 - round(share * 20))
        how = ("they fit: whole documents go into the context" if whole else
               "too long for the context: the passages that best match each question are used")
        return f"{bar} {total:,} of {n_ctx:,} context tokens — {how}."

    def fit(self, docs: list[Document], question: str, conv: Conversation | None, max_tokens: int) -> Selection:
        """What of the documents the next user turn of `conv` carries: whole, or the best passages."""
        messages = self.engine_messages(conv) if conv is not None else []
        n_ctx = self.runtime.engine.n_ctx
        history = self.runtime.engine.prompt_tokens(Request(messages=messages or [{"role": "user", "content": ""}]))
        budget = document_budget(n_ctx, len(history), min(max_tokens, max_answer_tokens(n_ctx)))
        # The meter asks with no question: it needs only whole-or-not, not the chunks' vectors.
        embedder = shared_models().default() if question.strip() else None
        return select(question, docs, budget, self.count_tokens, embedder=embedder, vectors=self.vectors,
                      context=recent_questions(conv), passage_tokens=passage_budget(n_ctx))

    @staticmethod
    def searched_documents(conv: Conversation, attached: list[str]) -> list[str]:
        """The documents earlier turns of `conv` retrieved passages from (too long to go in whole), less
        those attached again now: a follow-up question searches them for passages of its own."""
        found: list[str] = []
        for m in conv.messages:
            if m.role == "user" and m.stats.get("mode") == "retrieved":
                for path in [*m.stats.get("documents", []), *m.stats.get("searched", [])]:
                    if path not in attached and path not in found and Path(path).is_file():
                        found.append(path)
        return found

    # -- conversations --------------------------------------------------------------------

    def engine_messages(self, conv: Conversation, whole: bool = False) -> list[dict[str, str]]:
        """The conversation as the model sees it: a turn with documents carries them in front (`read_as`), and
        the turns the newest one's overflow left out are left out (all are kept with `whole`)."""
        head = [{"role": "system", "content": conv.system_prompt}] if conv.system_prompt else []
        source = self.runtime.engine.template.source
        last = len(conv.messages) - 1
        messages = head + [with_thinking({"role": m.role, "content": pinned.read_as(m, i == last)}, m.stats, source)
                           for i, m in enumerate(conv.messages)]
        asked = [m for m in conv.messages if m.role == "user"]
        gone = asked[-1].stats.get("left_out", []) if asked and not whole else []
        return without(messages, gone) if gone else messages

    @staticmethod
    def display(conv: Conversation | None) -> list[dict[str, str]]:
        """The conversation as the chat window shows it (shown.py)."""
        return shown.conversation(conv)

    def edit_turn(self, conv_id: str, index: int, message: str, system: str, sampling: Sampling) -> None:
        """Put an edited user turn at `index`, its documents kept; what followed stays as a branch to go back to."""
        conv = self.store.get(conv_id)
        assert conv is not None
        docs = list(conv.messages[index].stats.get("documents", []))
        branches, cut = versions.fork(self.store, conv_id, index)
        try:
            self.add_user_turn(conv_id, message, docs, system, sampling, branches)
        except LocalchatError:  # refused (too long): the chat is as it was
            self.store.splice(conv_id, index, cut)
            raise

    def show_branch(self, conv_id: str, index: int, step: int) -> None:
        """Step to the previous (-1) or next (+1) branch of user turn `index`; a first turn's branch names the chat."""
        if versions.show_branch(self.store, conv_id, index, step) and index == 0:
            conv = self.store.get(conv_id)
            if conv is not None and not conv.settings.get("renamed"):
                self.store.update(conv_id, title=title_of(conv.messages[0].content))

    def open_conversation(self, conv_id: str | None, message: str, system: str, sampling: Sampling) -> str:
        """The conversation the message goes to (a new one when there is none), its settings saved."""
        check_prompt_size([message, system], self.runtime.engine.n_ctx)
        conv = self.store.get(conv_id) if conv_id else None
        # Refused before a new chat is made for it: no empty chat is left behind in the list.
        self.fitted(dataclasses.replace(conv or Conversation("", ""), system_prompt=system), message, sampling)
        if conv_id is None or conv is None:
            return self.store.create(title_of(message), system, settings_of(sampling))
        self.save_settings(conv_id, system, sampling)
        return conv_id

    def save_settings(self, conv_id: str, system: str, sampling: Sampling) -> None:
        conv = self.store.get(conv_id)
        if conv is not None:  # the settings dict also carries what is not a setting ("renamed")
            self.store.update(conv_id, system_prompt=system, settings=conv.settings | settings_of(sampling))

    def rename(self, conv_id: str, title: str) -> None:
        """A title the user chose: later edits of the first message no longer change it."""
        conv = self.store.get(conv_id)
        if conv is not None and title.strip():
            self.store.update(conv_id, title=title_of(title), settings=conv.settings | {"renamed": True})

    def add_user_turn(self, conv_id: str | None, message: str, documents: list[str], system: str,
                      sampling: Sampling, extra: dict[str, Any] | None = None) -> str:
        """Save the user's message (with its documents fitted in) and return the conversation id."""
        conv_id = self.open_conversation(conv_id, message, system, sampling)
        conv = self.store.get(conv_id)
        assert conv is not None
        if not conv.messages and not conv.settings.get("renamed"):
            # A first message edited (or a chat emptied) names the chat anew.
            self.store.update(conv_id, title=title_of(message))
        stats: dict[str, Any] = {}
        searched = self.searched_documents(conv, documents)
        if documents or searched:
            selection = self.fit(self.documents(documents + searched), message, conv, sampling.max_tokens)
            # The documents open the turn; the turns before keep theirs as read, so their prefix is reused.
            stats = {"prompt": build_prompt(message, selection), "included": selection.summary(),
                     "passages": selection.passages(), "mode": selection.mode, "documents": documents,
                     "searched": searched}
        fitted = self.fitted(conv, stats.get("prompt", message), sampling)
        if fitted.gone:
            stats["left_out"] = list(fitted.gone)
        self.store.append(conv_id, "user", message, stats | (extra or {}))
        return conv_id

    def bounded(self, sampling: Sampling) -> Sampling:
        """`sampling` with Max tokens within what the loaded context allows (a chat's stored limit may be from a
        longer context than the model has now)."""
        room = max_answer_tokens(self.runtime.engine.n_ctx)
        return sampling if sampling.max_tokens <= room else dataclasses.replace(sampling, max_tokens=room)

    def fitted(self, conv: Conversation, turn: str, sampling: Sampling) -> Fitted:
        """The chat with `turn` next as the model will read it: the early turns the chat's overflow setting
        leaves out so it and its answer fit (never a turn with attached documents), or refused before it is
        kept (ContextOverflowError)."""
        engine = self.runtime.engine
        sampling = self.bounded(sampling)
        asked = [m for m in conv.messages if m.role == "user"]
        first = 0 if not conv.messages or conv.messages[0].role == "user" else 1  # an imported chat may not
        messages = self.engine_messages(conv, whole=True) + [{"role": "user", "content": turn}]

        def fitting(keep_pinned: bool = True) -> Fitted:
            return fit(messages, lambda kept: len(engine.prompt_tokens(Request(messages=kept))),
                       engine.n_ctx - sampling.max_tokens, sampling.context_overflow,
                       pinned=lambda i: keep_pinned and 0 <= i - first < len(asked) and pinned.pinned(asked[i - first]),
                       at_least=len(asked[-1].stats.get("left_out", [])) if asked else 0)
        said = f"(Max tokens, {sampling.max_tokens:,}, is set aside for the answer; the model's context is " \
               f"{engine.n_ctx:,}.)"
        try:
            return fitting()
        except ContextOverflowError as exc:
            error = ContextOverflowError(f"{exc} {said}")
        names = pinned.pinned_names(conv) if sampling.context_overflow != "refuse" else []
        with contextlib.suppress(ContextOverflowError):  # the way out is offered only where it is one
            if names and fitting(keep_pinned=False):
                error = PinnedDocumentsError(pinned.refusal(names, said))
        raise error

    # -- generation -----------------------------------------------------------------------

    def answer(self, conv_id: str, sampling: Sampling, versions: list[dict[str, Any]] | None = None,
               begun: str = "") -> Iterator[str]:
        """Stream the reply to the conversation's last user turn as growing markdown; saves it at the end.

        `versions`: the earlier answers to the same turn (regenerate); the new one is kept beside them.
        `begun`: what the answer already says (an answer cut at Max tokens, continued): it goes on from there.
        """
        conv = self.store.get(conv_id)
        assert conv is not None and conv.messages and conv.messages[-1].role == "user"
        included = conv.messages[-1].stats.get("included", "")
        passages = conv.messages[-1].stats.get("passages")
        left_out = len(conv.messages[-1].stats.get("left_out", []))
        engine, writer = self.runtime.engine, self.model_name()  # a switch mid-answer does not rename it
        submitted = time.perf_counter()
        params = self.bounded(sampling).params()
        if begun:  # the engine counts what the answer begins with in its limit: Max tokens more, from there
            params.max_tokens = (params.max_tokens or 0) + self.count_tokens(begun)
        # Rendered here, with this chat's thinking switch (the answer's thinking is read apart as it streams),
        # the chat reaches the engine as a prompt: the fallback template's markers end it.
        params.stop = list(dict.fromkeys([*params.stop, *engine.template.stops]))
        prompt = engine.template.render(self.engine_messages(conv), switches=switches(engine.template.source,
                                                                                     sampling.thinking))
        # A chat with MCP tools on answers in a loop of model turns and calls (tool_loop.py); a continued one does not.
        run = None if begun else tool_run(self.tools, conv, engine, self.engine_messages(conv), switches(
            engine.template.source, sampling.thinking), params, sampling.thinking_budget)
        view = run.view if run is not None else ThinkingView(engine.template.source, prompt)
        if begun:  # an answer continued: the text so far is its beginning, as the model reads it too
            view.answer, view.raw = begun, [begun]
        stream = run or Budgeted(engine.submit, Request(prompt=prompt, sampling=params, forced=begun), view,
                                 sampling.thinking_budget)
        self.active[conv_id] = stream
        stats: Stats | None = None
        finish, error = "stop", ""
        started = time.perf_counter()
        first_done, last_draw, num_deltas, t_first = -1, 0.0, 0, 0.0
        try:
            yield render.reply_markdown("", {}, included, "waiting for the model")
            for event in stream:
                now = time.perf_counter()
                if isinstance(event, TextDelta):
                    view.feed(event.text)
                    num_deltas += 1
                    t_first = t_first or now
                    if now - last_draw >= _REDRAW_S:
                        last_draw = now
                        # A rate needs two tokens: the first alone would read "0 tokens/s" while text shows.
                        rate = (num_deltas - 1) / (now - t_first) if num_deltas > 1 and now > t_first else 0.0
                        yield render.reply_markdown(view.answer, view.saved(), included,
                                                    f"{'thinking' if view.thinking else 'generating'}"
                                                    f"{f', {rate:.0f} tokens/s' if rate else ''}",
                                                    thinking_now=view.thinking)
                elif isinstance(event, PrefillProgress):
                    if first_done < 0:
                        first_done, started = event.done, now
                    if now - last_draw >= _REDRAW_S and event.done < event.total:
                        last_draw = now
                        yield render.reply_markdown("", {}, included, render.prefill_line(
                            event.done, event.total, started, first_done, now))
                elif isinstance(event, ToolStep):  # a call's card changed: drawn at once
                    yield render.reply_markdown(view.answer, view.saved(), included, event.note)
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
            view.finish(cut=finish == "length")
            saved = {"model": writer} | render.stats_dict(stats, engine.n_ctx) | {"finish_reason": finish} \
                | view.saved()
            if stats is not None:  # the wait the user saw, from Send to the last token
                saved["total_s"] = round(time.perf_counter() - submitted, 2)
            if included:
                saved["included"] = included
            if passages:
                saved["passages"] = passages
            if left_out:
                saved["left_out"] = left_out
            text = view.answer
            if error:  # shown under the reply, never sent to the model as what it said
                saved["error"] = error
            if versions:
                saved |= {"versions": [*versions, {"content": text, "stats": dict(saved)}], "version": len(versions)}
            self.store.append(conv_id, "assistant", text, saved)
        yield render.reply_markdown(text, saved, included, render.reply_note(saved), passages) + shown.error_note(saved)

    @contextlib.contextmanager
    def turn(self, conv_id: str, wait_s: float | None = None) -> Iterator["Turn | None"]:
        """Hold the conversation for one turn: a message sent while an answer streams waits for it. The turn
        may be handed over (`Turn.hand_over`) to a thread that finishes the answer and then ends it. With
        `wait_s`, a turn not free within it is not taken (None)."""
        with self._turns_lock:
            lock = self._turns.setdefault(conv_id, threading.Lock())
        if not lock.acquire(timeout=-1 if wait_s is None else wait_s):
            yield None
            return
        held = Turn(lock)
        try:
            yield held
        finally:
            if not held.handed_over:
                lock.release()

    def busy(self, conv_id: str | None) -> bool:
        """Whether an answer of the conversation is in progress."""
        lock = self._turns.get(conv_id or "")
        return lock is not None and lock.locked()

    def stop(self, conv_id: str | None) -> None:
        """Cancel the conversation's answer in progress, mid-prefill included."""
        stream = self.active.get(conv_id or "")
        if stream is not None:
            stream.cancel()

    def model_name(self) -> str:
        """The loaded model as the window names it: a catalog name, or a file's name."""
        model = self.runtime.model
        return Path(model).name if model.lower().endswith(".gguf") else model

    def status(self) -> str:
        rt = self.runtime
        worker = rt.engine.worker
        model = self.model_name()
        weights = worker.describe()
        placed = rt.engine.residences() if hasattr(rt.engine, "residences") else {}
        return render.status_markdown(model, worker.model_path, weights, rt.engine.n_ctx, rt.engine.placement,
                                      rt.engine.drafter_name, residence.describe_all(placed), rt.engine.template.fallback,
                                      residence.memory_text(residence.live_memory(rt.engine)))

