"""The chat window: a Gradio Blocks app over ChatCore, laid out from its parts in page order. Each part builds
its components and wires its own events: the sidebar (sidebar.py) with the hardware wizard at its foot
(wizard_panel.py, its progress above the chat), the chat (chat_view.py) with the composer (composer.py), the
settings drawer (settings_panel.py) and the Models panel (models_panel.py). What more than one part uses is one Window
(window.py); the page load, which fills all of them, is wired here."""

from __future__ import annotations

import gradio as gr

from ..chat.core import ChatCore
from ..chat.pre_read import PreReader
from ..chat.presets import Presets
from ..chat.session import Sampling
from ..wizard.tuning import tuned_summary
from . import chat_view, sidebar, tools_panel, wizard_panel
from .models_panel import ModelsPanel
from .settings_panel import build_settings_panel, wire_settings_panel
from .window import Window
from .wizard_panel import WIZARD

NARROW_PX = 800  # below this width the sidebar starts closed: it would cover the chat


def build_ui(core: ChatCore, defaults: Sampling | None = None, system_prompt: str = "") -> gr.Blocks:
    """The Blocks app; `defaults` and `system_prompt` are the settings of a new conversation."""
    defaults = defaults or Sampling()
    presets = Presets()
    with gr.Blocks(title="localchat", analytics_enabled=False, fill_height=True) as demo:
        conv_id, pending, drafts = gr.State(None), gr.State([]), gr.State({})
        last_chat = gr.BrowserState(None, storage_key="localchat-last-chat")  # reopened on reload
        width = gr.Number(visible=False)  # the window's width, read by the page-load script
        with gr.Sidebar(open=True) as drawer:
            bar = sidebar.build(core.store, conv_id)
            wizard = wizard_panel.build()
        bar.confirm.render()  # over the page, beside what asked for it: not inside a sidebar that may be closed
        progress = wizard_panel.build_progress()  # above the chat, as wide as it
        view = chat_view.build()
        turn_tool = tools_panel.build_turn_tool()
        panel = build_settings_panel(defaults, system_prompt, core, presets)
        with gr.Accordion("Models: catalog, downloads, import", open=False, elem_id="models"):
            models = ModelsPanel(core)
        tools = tools_panel.build(turn_tool)

        w = Window(core, defaults, system_prompt, presets, PreReader(core), conv_id, pending, drafts, bar.convs,
                   bar.model, bar.status, view.chatbot, view.copy_texts, view.compose.message, view.compose.attached,
                   panel)
        replies = chat_view.wire(w, view)
        tools_panel.wire(w, tools, [view.compose.send.click, w.message.submit], demo)
        wire_settings_panel(panel, core, presets, defaults, conv_id, bar.status)
        sidebar.wire(w, bar)
        conv_id.change(lambda cid: cid, [conv_id], [last_chat], api_name=False, queue=False)
        for_a_chat = [view.regenerate, view.edit, view.carry_on, bar.rename, bar.delete]
        conv_id.change(lambda cid: [gr.update(interactive=cid is not None)] * len(for_a_chat), [conv_id],
                       for_a_chat, api_name=False, queue=False)
        models.wire(bar.model, bar.status, demo)  # the model picker switches through the panel
        wizard_panel.wire(w, wizard, progress, models)
        def page_load(last: str | None, px: float | None, request: gr.Request) -> tuple:
            return on_page_load(w, last, px, request)  # Gradio hands a request only to a function naming it

        # The message box takes the keys on load, but on a phone, where focus would open the keyboard over the chat.
        demo.load(page_load, [last_chat, width],
                  [bar.convs, bar.model, bar.status, wizard.note, wizard.box, drawer, *w.chat_state],
                  api_name=False, js="(last, px) => { localchatApplyTheme(); if (innerWidth >= 800) "
                                     "document.querySelector('#message textarea')?.focus(); "
                                     "return [last, window.innerWidth]; }").then(
            replies.follow, [conv_id], w.chat_outputs, api_name=False, show_progress="hidden")  # a reload mid-answer
    no_dead_clicks(demo)
    return demo


def no_dead_clicks(demo: gr.Blocks) -> None:
    """Every button's click counts. Gradio's default for a click ("once") drops one made while the same
    button's event is still ending: its toast or its output already shows, so a person (or a test) clicks again
    at once, and on a busy machine that click is lost, silently, the server never hearing of it. The last click
    made meanwhile runs once the event has ended instead."""
    for fn in demo.fns.values():
        if fn.trigger_mode == "once" and fn.targets and all(event == "click" for _, event in fn.targets):
            fn.trigger_mode = "always_last"


def on_page_load(w: Window, last: str | None, px: float | None, request: gr.Request) -> tuple:
    """The chat list, the model picker, the status, the wizard's note and accordion, the sidebar (closed on a
    narrow window), then the chat last open in this browser."""
    profile, note = tuned_summary()
    opened = w.load(last)
    w.opened(request, opened[2])
    # The wizard waits closed (it opened on every load until tuned): its title says whether this machine is tuned.
    wizard = gr.update(open=False, label=WIZARD + (" (not tuned yet)" if profile is None else ""))
    return (w.conversations(opened[2], request), w.picker(), w.core.status(), note, wizard,
            gr.update(open=not px or px >= NARROW_PX), *opened)
