"""The chat window: a Gradio Blocks app over ChatCore (over 300 lines: Blocks ties each handler to the
components it closes over, so the components and their handlers stay in one function)."""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Iterator

import gradio as gr

from ..errors import LocalchatError
from ..runtime.sampling import LIMITS
from .chat import SHOWN_SETTINGS, ChatCore, Sampling
from .models_panel import ModelsPanel, model_choices
from .tuning import TuneJob, tuned_summary
from .uploads import ACCEPTED, store_upload

log = logging.getLogger(__name__)

NARROW_PX = 800  # below this width the sidebar starts closed: it would cover the chat


def user_error(message: str) -> gr.Error:
    """A toast for an expected user error: Gradio would print a traceback for each one otherwise."""
    return gr.Error(message, print_exception=False)


def slider(name: str, label: str, low: float, high: float, step: float, value: float) -> gr.Slider:
    """A sampling slider over the window's range for it, kept inside what the engine accepts (LIMITS)."""
    limit = LIMITS[name]
    if limit.low is not None:
        low = max(low, limit.low + (step if limit.open_low else 0))
    if limit.high is not None:
        high = min(high, limit.high - (step if limit.open_high else 0))
    return gr.Slider(low, high, value=value, step=step, label=label, elem_id=name.replace("_", "-"))


def when(timestamp: float, now: float | None = None) -> str:
    """A chat's date in the list: the time today, the day this year, the date before."""
    moment, today = time.localtime(timestamp), time.localtime(now)
    if moment[:3] == today[:3]:
        return time.strftime("%H:%M", moment)
    return time.strftime("%b %d" if moment.tm_year == today.tm_year else "%Y-%m-%d", moment)


def sources(conv: Any) -> str:
    """Each shown message's own text, for the copy buttons (the page script reads it)."""
    return json.dumps([m.content for m in conv.messages] if conv is not None else [])


def build_ui(core: ChatCore, defaults: Sampling | None = None) -> gr.Blocks:
    """The Blocks app; `defaults` are the settings of a new conversation."""
    defaults = defaults or Sampling()
    store = core.store

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
            model = gr.Dropdown(label="Model", choices=model_choices(core.runtime.model), value=core.runtime.model,
                                allow_custom_value=True, elem_id="model")
            status = gr.Markdown(elem_id="status")
            theme_btn = gr.Button("Dark / light", size="sm", elem_id="theme-toggle")
            # Open where the machine is not tuned (checked again on every page load).
            with gr.Accordion("Hardware wizard", open=tuned_summary()[0] is None, elem_id="tune") as tune_box:
                tune_note = gr.Markdown(elem_id="tune-note")
                tune_download = gr.Checkbox(True, label="May download a better model", elem_id="tune-download")
                tune_btn = gr.Button("Tune for this machine", size="sm", elem_id="tune-button")
                tune_log = gr.Textbox(label="Wizard", lines=8, max_lines=8, interactive=False, visible=False,
                                      autoscroll=True, elem_id="tune-log")
        chatbot = gr.Chatbot(elem_id="chat", label="localchat", sanitize_html=True, allow_tags=False,
                             height="65vh", buttons=["copy"], feedback_options=None, editable="user",
                             placeholder="Ask anything, or attach documents and ask about them.")
        copy_texts = gr.Textbox(value="[]", elem_id="sources", elem_classes="lc-hidden", show_label=False,
                                interactive=False, container=False)
        with gr.Row(equal_height=True):
            message = gr.Textbox(placeholder="Message (Enter sends, Esc stops)", show_label=False,
                                 scale=8, lines=1, max_lines=8, elem_id="message")
            send_btn = gr.Button("Send", variant="primary", scale=1, min_width=80, elem_id="send")
            stop_btn = gr.Button("Stop", variant="stop", scale=1, min_width=80, elem_id="stop")
        with gr.Row():
            prev_btn = gr.Button("‹ Answer", size="sm", elem_id="previous-answer", min_width=60)
            next_btn = gr.Button("Answer ›", size="sm", elem_id="next-answer", min_width=60)
            regen_btn = gr.Button("Regenerate", size="sm", elem_id="regenerate")
            edit_btn = gr.Button("Edit last message", size="sm", elem_id="edit")
            clear_docs_btn = gr.Button("Remove documents", size="sm")
        meter = gr.Markdown(elem_id="meter")
        files = gr.File(label="Attach documents (PDF, DOCX, TXT, MD, HTML, source)", file_count="multiple",
                        file_types=ACCEPTED, height=110, elem_id="files")
        with gr.Accordion("Settings for this chat", open=False):
            system = gr.Textbox(label="System prompt", lines=2, elem_id="system")
            with gr.Row():
                temperature = slider("temperature", "Temperature", 0, 2, 0.05, defaults.temperature)
                top_p = slider("top_p", "Top p", 0, 1, 0.05, defaults.top_p)
                max_tokens = slider("max_tokens", "Max tokens", 16, 4096, 16, defaults.max_tokens)
            with gr.Row():
                top_k = slider("top_k", "Top k (0: off)", 0, 200, 1, defaults.top_k)
                min_p = slider("min_p", "Min p", 0, 1, 0.01, defaults.min_p)
                repeat_penalty = slider("repeat_penalty", "Repeat penalty (1: off)", 0.5, 2, 0.05,
                                        defaults.repeat_penalty)
                seed = gr.Number(defaults.seed, label="Seed (empty: random)", precision=0, minimum=0,
                                 maximum=LIMITS["seed"].high, elem_id="seed")
            gr.Markdown(f"Context: {core.runtime.engine.n_ctx:,} tokens (set with --n-ctx or the wizard).",
                        elem_id="context-note")

        with gr.Accordion("Models: catalog, downloads, import", open=False, elem_id="models"):
            models_panel = ModelsPanel(core)

        # -- handlers ---------------------------------------------------------------------------
        # An expected error is a warning toast and the outputs stay as they were: a raised error
        # would also paint every output of the event with a red "Error" badge.

        def sampling_of(values: tuple) -> Sampling:
            """The sliders' values (in SHOWN_SETTINGS order) over the server's defaults."""
            chosen = dict(zip(SHOWN_SETTINGS, values))
            chosen["max_tokens"], chosen["top_k"] = int(chosen["max_tokens"]), int(chosen["top_k"])
            chosen["seed"] = None if chosen["seed"] is None else int(chosen["seed"])
            return Sampling(**chosen, base=defaults.base)

        def respond(text: str, cid: str | None, docs: list[str], sys_prompt: str, *values: float) -> Iterator[tuple]:
            text, sys_prompt = text or "", sys_prompt or ""  # an untouched textbox may send None
            if not text.strip():
                yield (gr.skip(),) * 8
                return
            sampling = sampling_of(values)
            try:
                cid = core.open_conversation(cid, text, sys_prompt, sampling)
            except LocalchatError as exc:
                gr.Warning(str(exc))
                yield (gr.skip(),) * 8
                return
            if core.busy(cid):
                gr.Info("Sent once the answer in progress ends.")
            # The box is cleared once, now; the updates that stream the answer leave it alone.
            yield gr.skip(), "", cid, [], "", gr.skip(), gr.skip(), gr.skip()
            with core.turn(cid):  # a message sent mid-answer waits here for that answer to end
                try:
                    core.add_user_turn(cid, text, docs, sys_prompt, sampling)
                except LocalchatError as exc:
                    gr.Warning(str(exc))
                    yield gr.skip(), text, cid, docs, gr.skip(), gr.skip(), gr.skip(), gr.skip()
                    return
                yield from stream_reply(cid, sampling)

        def stream_reply(cid: str, sampling: Sampling, versions: list | None = None) -> Iterator[tuple]:
            """Called with the conversation's turn held."""
            shown = core.display(store.get(cid))
            try:
                for reply in core.answer(cid, sampling, versions):
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
                versions = core.drop_reply(conv.id)  # kept: ‹ › shows them again
                yield from stream_reply(conv.id, sampling_of(values), versions)

        def edit_message(cid: str | None, sys_prompt: str, temp: float, tp: float, mx: float, tk: float, mp: float,
                         rp: float, sd: float | None, edit: gr.EditData) -> Iterator[tuple]:
            """A user message edited in place: the chat continues from it, what followed is dropped."""
            index = edit.index if isinstance(edit.index, int) else edit.index[0]
            text = edit.value if isinstance(edit.value, str) else str(edit.value)
            conv = store.get(cid) if cid else None
            if conv is None or not 0 <= index < len(conv.messages) or conv.messages[index].role != "user":
                yield view(cid)[0], *(gr.skip(),) * 6, view(cid)[1]
                return
            sampling = sampling_of((temp, tp, mx, tk, mp, rp, sd))
            core.stop(cid)
            with core.turn(conv.id):
                docs = list(conv.messages[index].stats.get("documents", []))
                store.truncate(conv.id, index)
                try:
                    core.add_user_turn(conv.id, text, docs, sys_prompt or "", sampling)
                except LocalchatError as exc:
                    gr.Warning(str(exc))
                    yield *view(conv.id)[:1], text, conv.id, docs, *(gr.skip(),) * 3, view(conv.id)[1]
                    return
                yield from stream_reply(conv.id, sampling)

        def show_version(cid: str | None, step: int) -> tuple:
            if cid:
                core.show_version(cid, step)
            return view(cid)

        def edit_last(cid: str | None, mx: float) -> tuple:
            conv = store.get(cid) if cid else None
            users = [i for i, m in enumerate(conv.messages) if m.role == "user"] if conv else []
            if not users:
                gr.Warning("there is no message to edit yet.")
                return (gr.skip(),) * 5
            core.stop(cid)
            with core.turn(conv.id):  # the stopped answer is saved first, then dropped with its question
                conv = store.get(conv.id)
                users = [i for i, m in enumerate(conv.messages) if m.role == "user"]
                last = conv.messages[users[-1]]
                store.truncate(conv.id, users[-1])
            docs = list(last.stats.get("documents", []))
            return *view(conv.id), last.content, docs, core.meter(docs, int(mx), conv.id) if docs else ""

        def attach(uploaded: list[str] | None, docs: list[str], mx: float) -> tuple:
            docs = list(docs)
            errors = []
            for path in uploaded or []:
                try:
                    stored = store_upload(path)  # Gradio took it only from its upload folder (web.py)
                    core.documents([str(stored)])  # type and content check now, not at send time
                    docs.append(str(stored))
                except LocalchatError as exc:
                    errors.append(str(exc))
            for error in errors:
                gr.Warning(error)
            return docs, core.meter(docs, int(mx)), None

        def refresh_meter(docs: list[str], cid: str | None, mx: float) -> str:
            """The meter against this chat's history (attach alone does not know the chat)."""
            return core.meter(docs, int(mx), cid)

        def load(cid: str | None) -> tuple:
            conv = store.get(cid) if cid else None
            if conv is None:
                return [], "[]", None, "", *(gr.skip(),) * len(SHOWN_SETTINGS), [], ""
            s = conv.settings
            return (*view(conv.id), conv.id, conv.system_prompt,
                    *(s.get(name, getattr(defaults, name)) for name in SHOWN_SETTINGS), [], "")

        def new_chat() -> tuple:
            return [], "[]", None, "", *(getattr(defaults, name) for name in SHOWN_SETTINGS), [], "", \
                conversations(None)

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
                core.save_settings(cid, sys_prompt or "", sampling_of(values))

        tune_jobs: dict[str, TuneJob] = {}  # one wizard at a time for the whole app, whichever tab started it

        def tune(download: bool) -> Iterator[tuple]:
            job = tune_jobs.get("current")
            if job is None or not job.running:
                job = tune_jobs["current"] = TuneJob(download)
            while job.running:
                yield gr.update(value=job.log(), visible=True), gr.skip(), gr.skip(), gr.skip()
                time.sleep(0.5)
            job.wait()
            kept, note = tuned_summary()
            if job.returncode != 0 or kept is None:
                gr.Warning("The wizard stopped before it kept a model; its log says why.")
                yield gr.update(value=job.log(), visible=True), note, gr.skip(), gr.skip()
                return
            try:
                core.runtime.switch(kept.path)  # the tuned file, with its tuned settings
            except LocalchatError as exc:
                gr.Warning(f"tuned, but loading the kept model failed: {exc}")
                yield gr.update(value=job.log(), visible=True), note, gr.skip(), gr.skip()
                return
            gr.Info(f"Tuned: now answering with {kept.model} {kept.quant}.")
            yield (gr.update(value=job.log(), visible=True), note,
                   gr.update(choices=model_choices(core.runtime.model), value=core.runtime.model), core.status())

        def on_page_load(last: str | None, px: float | None) -> tuple:
            profile, note = tuned_summary()
            opened = load(last)
            return (conversations(opened[2]), gr.update(choices=model_choices(core.runtime.model),
                                                         value=core.runtime.model), core.status(), note,
                    gr.update(open=profile is None), gr.update(open=not px or px >= NARROW_PX), *opened)

        # -- wiring ---------------------------------------------------------------------------

        sliders = [temperature, top_p, max_tokens, top_k, min_p, repeat_penalty, seed]  # SHOWN_SETTINGS' order
        settings_inputs = [system, *sliders]
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
        edit_btn.click(edit_last, [conv_id, max_tokens], [*chat_outputs, message, pending, meter], api_name=False)
        files.upload(attach, [files, pending, max_tokens], [pending, meter, files], api_name=False).then(
            refresh_meter, [pending, conv_id, max_tokens], [meter], api_name=False)
        clear_docs_btn.click(lambda: ([], ""), None, [pending, meter], api_name=False)
        chat_state = [*chat_outputs, conv_id, *settings_inputs, pending, meter]
        convs.input(load, [convs], chat_state, api_name=False)
        new_btn.click(new_chat, None, [*chat_state, convs], api_name=False)
        # The chat's own clear icon starts a new chat; the stored one stays in the list.
        chatbot.clear(new_chat, None, [*chat_state, convs], api_name=False)
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
        gr.on([system.blur, seed.blur, *(x.release for x in sliders[:-1])], save_settings,
              [conv_id, *settings_inputs], None, api_name=False)
        models_panel.wire(model, status, demo)  # the model picker switches through the panel
        tune_btn.click(tune, [tune_download], [tune_log, tune_note, model, status], api_name=False,
                       concurrency_limit=1)
        demo.load(on_page_load, [last_chat, width], [convs, model, status, tune_note, tune_box, sidebar, *chat_state],
                  api_name=False, js="(last, px) => { localchatApplyTheme(); return [last, window.innerWidth]; }")
    return demo
