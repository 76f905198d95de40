"""The chat window: a Gradio Blocks app over ChatCore (over 300 lines: Blocks ties each handler to the
components it closes over, so the components and their handlers stay in one function)."""

from __future__ import annotations

import functools
import json
import logging
import time
from typing import Any, Iterator

import gradio as gr

from ..errors import LocalchatError
from . import composer as composing
from . import render
from . import versions
from .chat import ChatCore
from .session import SHOWN_SETTINGS, Sampling
from .models_panel import ModelsPanel, model_choices
from .pre_read import PreReader
from .presets import Presets
from .settings_panel import build_settings_panel, follow_load, resize, sampling_of, starting, wire_presets
from .transfer_panel import build_transfer
from .tuning import TuneJob, tuned_summary

log = logging.getLogger(__name__)

NARROW_PX = 800  # below this width the sidebar starts closed: it would cover the chat


def when(timestamp: float, now: float | None = None) -> str:
    """A chat's date in the list: the time today, the day this year, the date before."""
    moment, today = time.localtime(timestamp), time.localtime(now)
    if moment[:3] == today[:3]:
        return time.strftime("%H:%M", moment)
    return time.strftime("%b %d" if moment.tm_year == today.tm_year else "%Y-%m-%d", moment)


def sources(conv: Any) -> str:
    """Each shown message's own text, for the copy buttons (the page script reads it)."""
    return json.dumps([m.content for m in conv.messages] if conv is not None else [])


def build_ui(core: ChatCore, defaults: Sampling | None = None, system_prompt: str = "") -> gr.Blocks:
    """The Blocks app; `defaults` and `system_prompt` are the settings of a new conversation."""
    defaults = defaults or Sampling()
    store = core.store
    pre_reader = PreReader(core)
    presets = Presets()

    def conversations(selected: str | None = None, query: str = "") -> dict[str, Any]:
        found = store.search(query.strip()) if query and query.strip() else store.list()
        return gr.update(choices=[(f"{c.title} · {when(c.updated)}", c.id) for c in found], value=selected)

    def view(cid: str | None) -> tuple[list[dict[str, str]], str]:
        """The chat and its copy texts, from what is stored."""
        conv = store.get(cid) if cid else None
        return core.display(conv), sources(conv)

    with gr.Blocks(title="localchat", analytics_enabled=False, fill_height=True) as demo:
        conv_id = gr.State(None)
        pending = gr.State([])  # stored paths of the documents attached to the next message
        drafts = gr.State({})  # conversation id ("" for a new chat) -> its unsent message
        last_chat = gr.BrowserState(None, storage_key="localchat-last-chat")  # reopened on reload
        width = gr.Number(visible=False)  # the window's width, read by the page-load script
        with gr.Sidebar(open=True) as sidebar:
            new_btn = gr.Button("New chat", variant="primary", elem_id="new-chat")
            search = gr.Textbox(placeholder="Search chats", show_label=False, elem_id="search", container=False)
            convs = gr.Radio(label="Conversations", choices=[], elem_id="conversations")
            rename_box = gr.Textbox(placeholder="Rename this chat (Enter saves)", show_label=False, elem_id="rename",
                                    container=False)
            delete_btn = gr.Button("Delete this chat", size="sm", elem_id="delete")
            with gr.Column(visible=False, elem_id="delete-confirm") as delete_row:
                gr.Markdown("Delete this chat for good?")
                with gr.Row():
                    delete_yes = gr.Button("Delete", variant="stop", size="sm", elem_id="delete-yes")
                    delete_no = gr.Button("Keep it", size="sm", elem_id="delete-cancel")
            build_transfer(store, conv_id, convs, conversations)
            # Filled on page load: the page's config (GET /config) would list every model file's path here.
            model = gr.Dropdown(label="Model", choices=[], value=None, allow_custom_value=True, elem_id="model")
            status = gr.Markdown(elem_id="status")
            theme_btn = gr.Button("Dark / light", size="sm", elem_id="theme-toggle")
            # Open where the machine is not tuned (checked again on every page load).
            with gr.Accordion("Hardware wizard", open=tuned_summary()[0] is None, elem_id="tune") as tune_box:
                tune_note = gr.Markdown(elem_id="tune-note")
                # Off unless asked: a better model can be gigabytes, fetched without another question.
                tune_download = gr.Checkbox(False, label="May download a better model (can be several GB)",
                                            elem_id="tune-download")
                tune_placements = gr.Checkbox(True, label="Measure where the model runs best (splits across "
                                                          "devices; a few minutes more)", elem_id="tune-placements")
                tune_btn = gr.Button("Tune for this machine", size="sm", elem_id="tune-button")
                tune_cancel = gr.Button("Cancel the wizard", size="sm", variant="stop", visible=False,
                                        elem_id="tune-cancel")
                tune_log = gr.Textbox(label="Wizard", lines=14, max_lines=14, interactive=False, visible=False,
                                      autoscroll=True, elem_id="tune-log")
        chatbot = gr.Chatbot(elem_id="chat", label="localchat", sanitize_html=True, allow_tags=False,
                             height="65vh", buttons=["copy"], feedback_options=None, editable="user",
                             placeholder="Ask anything, or attach documents and ask about them.")
        copy_texts = gr.Textbox(value="[]", elem_id="sources", elem_classes="lc-hidden", show_label=False,
                                interactive=False, container=False)
        # The page script's requests that carry a value (a chip's ×, a branch arrow): it puts the request here.
        action = gr.Textbox(elem_id="action", elem_classes="lc-hidden", show_label=False, container=False)
        action_go = gr.Button("Act", elem_id="action-go", elem_classes="lc-hidden")
        compose = composing.build_composer()
        message, send_btn, stop_btn, meter = compose.message, compose.send, compose.stop, compose.attached
        with gr.Row():
            prev_btn = gr.Button("‹ Answer", size="sm", elem_id="previous-answer", min_width=60)
            next_btn = gr.Button("Answer ›", size="sm", elem_id="next-answer", min_width=60)
            regen_btn = gr.Button("Regenerate", size="sm", elem_id="regenerate")
            edit_btn = gr.Button("Edit last message", size="sm", elem_id="edit")
            settings_btn = gr.Button("Settings", size="sm", elem_id="open-settings")
        panel = build_settings_panel(defaults, system_prompt, core, presets)
        system, sliders = panel.system, panel.controls
        max_tokens, seed = panel.control("max_tokens"), panel.control("seed")

        with gr.Accordion("Models: catalog, downloads, import", open=False, elem_id="models"):
            models_panel = ModelsPanel(core)

        # -- handlers ---------------------------------------------------------------------------
        # An expected error is a warning toast and the outputs stay as they were: a raised error
        # would also paint every output of the event with a red "Error" badge.

        def respond(request: gr.Request, text: str, cid: str | None, docs: list[str], sys_prompt: str,
                    *values: float) -> Iterator[tuple]:
            text, sys_prompt = text or "", sys_prompt or ""  # an untouched textbox may send None
            if not text.strip():
                yield (gr.skip(),) * 8
                return
            sampling = sampling_of(values, defaults)
            try:
                cid = core.open_conversation(cid, text, sys_prompt, sampling)
            except LocalchatError as exc:
                gr.Warning(str(exc))
                yield (gr.skip(),) * 8
                return
            # The question takes over what the read-ahead has read so far, and reads the rest itself.
            pre_reader.stop(request.session_hash)
            if core.busy(cid):
                gr.Info("Sent once the answer in progress ends.")
            # The box is cleared once, now; the updates that stream the answer leave it alone.
            yield gr.skip(), "", cid, [], "", gr.skip(), gr.skip(), gr.skip()
            with core.turn(cid):  # a message sent mid-answer waits here for that answer to end
                try:
                    core.add_user_turn(cid, text, docs, sys_prompt, sampling)
                except LocalchatError as exc:
                    gr.Warning(str(exc))
                    yield (gr.skip(), text, cid, docs, composing.shown(core, docs, sampling.max_tokens, cid), gr.skip(),
                           gr.skip(), gr.skip())
                    return
                yield from stream_reply(cid, sampling)

        def read_ahead(docs: list[str], cid: str | None, sys_prompt: str, tokens: float,
                       request: gr.Request) -> Iterator[str]:
            """Read the attached documents before the question (pre_read.py); a newer change ends it."""
            stream = pre_reader.start(request.session_hash, cid, docs or [], sys_prompt or "", int(tokens))
            if stream is None:
                yield ""
                return
            yield from pre_reader.follow(request.session_hash, stream)

        def stream_reply(cid: str, sampling: Sampling, earlier: list | None = None) -> Iterator[tuple]:
            """Called with the conversation's turn held; `earlier`: the answers a regenerate keeps."""
            shown = core.display(store.get(cid))
            try:
                for reply in core.answer(cid, sampling, earlier):
                    yield (shown + [{"role": "assistant", "content": reply}], gr.skip(), cid, gr.skip(), gr.skip(),
                           conversations(cid), gr.skip(), gr.skip())
            except LocalchatError as exc:  # refused by the engine (a regenerate with more max tokens, say)
                gr.Warning(str(exc))
            # The saved conversation, numbers included, is the final word on what was said.
            chat, copy = view(cid)
            yield chat, gr.skip(), cid, gr.skip(), gr.skip(), conversations(cid), core.status(), copy

        def regenerate(cid: str | None, *values: float) -> Iterator[tuple]:
            conv = store.get(cid) if cid else None
            if conv is None or not any(m.role == "user" for m in conv.messages):
                gr.Warning("nothing to regenerate yet; send a message first.")
                yield (gr.skip(),) * 8
                return
            with core.turn(conv.id):
                kept = versions.drop_reply(store, conv.id)  # ‹ › shows them again
                yield from stream_reply(conv.id, sampling_of(values, defaults), kept)

        def edit_message(edit: gr.EditData, cid: str | None, sys_prompt: str, *values: Any) -> Iterator[tuple]:
            """A user message edited in place: the chat continues from it; what followed stays a branch (‹ 1/2 ›)."""
            index = edit.index if isinstance(edit.index, int) else edit.index[0]
            text = edit.value if isinstance(edit.value, str) else str(edit.value)
            conv = store.get(cid) if cid else None
            if conv is None or not 0 <= index < len(conv.messages) or conv.messages[index].role != "user":
                yield view(cid)[0], *(gr.skip(),) * 6, view(cid)[1]
                return
            note = core.turn_note(index, conv.messages[index])  # the edit box starts with what the chat shows
            text = render.from_inert(text[: -len(note)] if note and text.endswith(note) else text)
            if not text.strip():  # emptied: nothing to ask, the chat stays as it was
                yield view(cid)[0], *(gr.skip(),) * 6, view(cid)[1]
                return
            sampling = sampling_of(values, defaults)
            core.stop(cid)
            with core.turn(conv.id):
                try:
                    core.edit_turn(conv.id, index, text, sys_prompt or "", sampling)
                except LocalchatError as exc:
                    gr.Warning(str(exc))
                    yield *view(conv.id)[:1], *(gr.skip(),) * 6, view(conv.id)[1]
                    return
                yield from stream_reply(conv.id, sampling)

        def show_version(cid: str | None, step: int) -> tuple:
            if cid:
                versions.show_version(store, cid, step)
            return view(cid)

        def act(request: str, cid: str | None, docs: list[str], mx: float) -> tuple:
            """A request of the page script: "remove:I" (a chip's ×), "branch:I:STEP" (a user turn's ‹ or ›)."""
            kind, *numbers = (request or "").split(":")
            try:
                args = [int(n) for n in numbers]  # from the client: numbers or nothing
            except ValueError:
                return (gr.skip(),) * 5
            if kind == "remove" and len(args) == 1:
                docs = [d for i, d in enumerate(docs or []) if i != args[0]]
                return gr.skip(), gr.skip(), docs, composing.shown(core, docs, mx, cid), gr.skip()
            if kind == "branch" and len(args) == 2 and cid:
                if core.busy(cid):
                    gr.Warning("the answer in progress ends first; stop it to switch branches now.")
                    return (gr.skip(),) * 5
                with core.turn(cid):
                    core.show_branch(cid, args[0], max(min(args[1], 1), -1))
                return *view(cid), gr.skip(), gr.skip(), conversations(cid)  # a first turn's branch names the chat
            return (gr.skip(),) * 5

        def edit_last(cid: str | None) -> None:
            """The page opened the last user message's own edit box (the pencil's: an edit forks the chat
            and the old branch stays); here only the toast when there is none."""
            conv = store.get(cid) if cid else None
            if conv is None or not any(m.role == "user" for m in conv.messages):
                gr.Warning("there is no message to edit yet.")

        def load(cid: str | None) -> tuple:
            conv = store.get(cid) if cid else None
            if conv is None:  # a new chat: the default preset's settings, or the server's
                return [], "[]", None, *starting(presets, defaults, system_prompt), [], ""
            s = conv.settings
            return (*view(conv.id), conv.id, conv.system_prompt,
                    *(s.get(name, getattr(defaults, name)) for name in SHOWN_SETTINGS), [], "")

        def switch_draft(drafts: dict[str, str], leaving: str | None, draft: str, opening: str | None) -> tuple:
            """The message box keeps an unsent draft per chat: the one left is kept, the one opened comes back."""
            drafts = dict(drafts or {})
            if draft and draft.strip():
                drafts[leaving or ""] = draft
            else:
                drafts.pop(leaving or "", None)
            return drafts.pop(opening or "", ""), drafts

        def open_chat(cid: str | None, leaving: str | None, draft: str, drafts: dict[str, str]) -> tuple:
            return *load(cid), *switch_draft(drafts, leaving, draft, cid)

        def open_new_chat(leaving: str | None, draft: str, drafts: dict[str, str]) -> tuple:
            return *new_chat(), *switch_draft(drafts, leaving, draft, None)

        def new_chat() -> tuple:
            return [], "[]", None, *starting(presets, defaults, system_prompt), [], "", conversations(None)

        def delete(cid: str | None) -> tuple:
            if cid:
                core.stop(cid)
                store.delete(cid)
            return (*new_chat(), gr.update(visible=False))

        def rename(title: str, cid: str | None) -> tuple:
            if cid and title and title.strip():
                core.rename(cid, title)
            return conversations(cid), ""

        def save_settings(cid: str | None, sys_prompt: str, *values: float) -> None:
            if cid:
                core.save_settings(cid, sys_prompt or "", sampling_of(values, defaults))

        tune_jobs: dict[str, TuneJob] = {}  # one wizard at a time for the whole app, whichever tab started it

        def tune(download: bool, placements: bool) -> Iterator[tuple]:
            job = tune_jobs.get("current")
            if job is None or not job.running:
                job = tune_jobs["current"] = TuneJob(download, placements)
            running, ended = gr.update(visible=True), gr.update(visible=False)  # the Cancel button
            while job.running:
                yield gr.update(value=job.log(), visible=True), gr.skip(), gr.skip(), gr.skip(), running
                time.sleep(0.5)
            job.wait()
            kept, note = tuned_summary()
            if job.cancelled:
                gr.Info("The wizard was cancelled; the settings are as they were.")
                yield gr.update(value=job.log(), visible=True), note, gr.skip(), gr.skip(), ended
                return
            if job.returncode != 0 or kept is None:
                gr.Warning("The wizard stopped before it kept a model; its log says why.")
                yield gr.update(value=job.log(), visible=True), note, gr.skip(), gr.skip(), ended
                return
            try:
                core.runtime.switch(kept.path)  # the tuned file, with its tuned settings
            except LocalchatError as exc:
                gr.Warning(f"tuned, but loading the kept model failed: {exc}")
                yield gr.update(value=job.log(), visible=True), note, gr.skip(), gr.skip(), ended
                return
            gr.Info(f"Tuned: now answering with {kept.model} {kept.quant}.")
            yield (gr.update(value=job.log(), visible=True), note,
                   gr.update(choices=model_choices(core.runtime.model), value=core.runtime.model), core.status(),
                   ended)

        def cancel_tune() -> None:
            job = tune_jobs.get("current")
            if job is not None:
                job.cancel()

        def on_page_load(last: str | None, px: float | None) -> tuple:
            profile, note = tuned_summary()
            opened = load(last)
            return (conversations(opened[2]), gr.update(choices=model_choices(core.runtime.model),
                                                         value=core.runtime.model), core.status(), note,
                    gr.update(open=profile is None), gr.update(open=not px or px >= NARROW_PX), *opened)

        # -- wiring ---------------------------------------------------------------------------

        settings_inputs = panel.inputs
        chat_outputs = [chatbot, copy_texts]
        reply_outputs = [chatbot, message, conv_id, pending, meter, convs, status, copy_texts]
        # The engine batches concurrent chats, so several tabs may stream at once; within one chat a
        # message sent mid-answer is taken at once ("multiple") and waits for its turn in ChatCore.
        for trigger in (send_btn.click, message.submit):
            trigger(respond, [message, conv_id, pending, *settings_inputs], reply_outputs,
                    api_name="send" if trigger == send_btn.click else False, concurrency_limit=8,
                    trigger_mode="multiple")
        stop_btn.click(core.stop, [conv_id], None, queue=False, api_name=False)
        regen_btn.click(regenerate, [conv_id, *sliders], reply_outputs,
                        api_name=False, concurrency_limit=8)
        edit_btn.click(edit_last, [conv_id], None, api_name=False,
                       js="(cid) => { const pencils = document.querySelectorAll(\"#chat button[aria-label='Edit']\");"
                          " if (pencils.length) pencils[pencils.length - 1].click(); return [cid]; }")
        compose.attach.upload(functools.partial(composing.attach, core), [compose.attach, pending, max_tokens, conv_id],
                              [pending, meter, compose.attach], api_name=False)
        # "multiple": a detach or a chat switch runs at once and ends the read-ahead in flight.
        pending.change(read_ahead, [pending, conv_id, system, max_tokens], [compose.reading], api_name=False,
                       trigger_mode="multiple", concurrency_limit=8, show_progress="hidden")
        action_go.click(act, [action, conv_id, pending, max_tokens], [*chat_outputs, pending, meter, convs], api_name=False,
                        js="(request, ...rest) => [window.localchatAction || '', ...rest]")
        settings_btn.click(None, None, None, js="() => localchatToggleSettings()", api_name=False)
        wire_presets(panel, presets, defaults, conv_id, save_settings, lambda: core.runtime.engine.n_ctx)
        panel.reload.click(functools.partial(resize, core), [panel.n_ctx], [panel.n_ctx, panel.note, status],
                           api_name=False, concurrency_limit=1)
        chat_state = [*chat_outputs, conv_id, *settings_inputs, pending, meter]
        convs.input(open_chat, [convs, conv_id, message, drafts], [*chat_state, message, drafts], api_name=False)
        new_btn.click(open_new_chat, [conv_id, message, drafts], [*chat_state, convs, message, drafts], api_name=False)
        # The chat's own trash icon deletes, as the sidebar's Delete does: it asks first, the chat shown
        # again meanwhile (the icon blanks the view in the page before it asks the server anything).
        chatbot.clear(lambda cid: (*view(cid), gr.update(visible=cid is not None)), [conv_id],
                      [*chat_outputs, delete_row], api_name=False)
        theme_btn.click(None, None, None, js="() => localchatToggleTheme()", api_name=False)
        prev_btn.click(lambda cid: show_version(cid, -1), [conv_id], chat_outputs, api_name=False)
        next_btn.click(lambda cid: show_version(cid, +1), [conv_id], chat_outputs, api_name=False)
        chatbot.edit(edit_message, [conv_id, *settings_inputs], reply_outputs, api_name=False, concurrency_limit=8)
        search.input(lambda q, cid: conversations(cid, q), [search, conv_id], [convs], api_name=False,
                     trigger_mode="always_last")
        rename_box.submit(rename, [rename_box, conv_id], [convs, rename_box], api_name=False)
        delete_btn.click(lambda cid: gr.update(visible=cid is not None), [conv_id], [delete_row], api_name=False)
        delete_no.click(lambda: gr.update(visible=False), None, [delete_row], api_name=False)
        delete_yes.click(delete, [conv_id], [*chat_state, convs, delete_row], api_name=False)
        conv_id.change(lambda cid: cid, [conv_id], [last_chat], api_name=False, queue=False)
        # The status changes with every load (a model switch, the wizard, a new context): so does the context box.
        status.change(functools.partial(follow_load, core), [panel.shown_ctx],
                      [panel.n_ctx, panel.note, panel.shown_ctx], api_name=False)
        gr.on([system.blur, seed.blur, *(x.input if isinstance(x, gr.Dropdown) else x.release
                                          for x in sliders if x is not seed)], save_settings,
              [conv_id, *settings_inputs], None, api_name=False)
        models_panel.wire(model, status, demo)  # the model picker switches through the panel
        # The Models panel's Measured column and "best here" come from the profile the wizard just saved.
        tune_cancel.click(cancel_tune, None, None, api_name=False, queue=False)
        tune_btn.click(tune, [tune_download, tune_placements], [tune_log, tune_note, model, status, tune_cancel],
                       api_name=False, concurrency_limit=1).then(models_panel.refreshed, None,
                                                 [models_panel.table, models_panel.local, model], api_name=False)
        demo.load(on_page_load, [last_chat, width], [convs, model, status, tune_note, tune_box, sidebar, *chat_state],
                  api_name=False, js="(last, px) => { localchatApplyTheme(); return [last, window.innerWidth]; }")
    return demo
