"""The sidebar: New chat, the chat search and list, rename, delete (asked first), export and import
(transfer_panel.py), the model picker, the status line and the theme toggle."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import gradio as gr

from ..chat import render
from ..chat.store import Store
from .transfer_panel import build_transfer
from .window import Window, conversations


@dataclass(slots=True)
class Sidebar:
    new: gr.Button
    search: gr.Textbox
    no_match: gr.Markdown  # "No chat matches “…”", shown by a search that finds none
    convs: gr.Radio
    rename: gr.Textbox
    delete: gr.Button
    confirm: gr.Column  # "Delete this chat for good?", shown by either Delete
    delete_yes: gr.Button
    delete_no: gr.Button
    model: gr.Dropdown
    status: gr.Markdown
    theme: gr.Button
    restore: gr.Textbox  # the opened chat's draft, put back by the page script only into an empty message box


def build(store: Store, conv_id: gr.State) -> Sidebar:
    """The sidebar's components, in page order (inside the gr.Sidebar being built)."""
    new_btn = gr.Button("New chat", variant="primary", elem_id="new-chat")
    search = gr.Textbox(placeholder="Search chats", show_label=False, elem_id="search", container=False)
    no_match = gr.Markdown("", visible=False, elem_id="search-empty")
    convs = gr.Radio(label="Conversations", choices=[], elem_id="conversations")
    # Off until a chat is open, as the answer buttons are.
    rename_box = gr.Textbox(placeholder="Rename this chat (Enter saves)", show_label=False, elem_id="rename",
                            container=False, interactive=False)
    delete_btn = gr.Button("Delete this chat", size="sm", elem_id="delete", interactive=False)
    # Rendered outside the sidebar (layout.py), beside whichever Delete asked (page.py): a phone's sidebar is closed.
    with gr.Column(visible=False, elem_id="delete-confirm", render=False) as confirm:
        gr.Markdown("Delete this chat for good? This cannot be undone.")
        with gr.Row():
            delete_yes = gr.Button("Delete", variant="stop", size="sm", elem_id="delete-yes")
            delete_no = gr.Button("Keep it", size="sm", elem_id="delete-cancel")
    build_transfer(store, conv_id, convs, functools.partial(conversations, store))
    # Filled on page load: the page's config (GET /config) would list every model file's path here.
    model = gr.Dropdown(label="Model", choices=[], value=None, allow_custom_value=True, elem_id="model")
    status = gr.Markdown(elem_id="status")
    theme_btn = gr.Button("Dark / light", size="sm", elem_id="theme-toggle")
    restore = gr.Textbox(elem_id="draft-restore", elem_classes="lc-hidden", show_label=False, container=False)
    return Sidebar(new_btn, search, no_match, convs, rename_box, delete_btn, confirm, delete_yes, delete_no, model, status,
                   theme_btn, restore)


def searched(store: Store, query: str, selected: str | None) -> tuple:
    """The chat list the search finds, and the line saying none matched, set by every search (hidden when
    some match or the search is emptied): an empty list alone reads as "no chats at all"."""
    query = (query or "").strip()
    listed = conversations(store, selected, query)
    if query and not listed["choices"]:
        return listed, gr.update(value=f"No chat matches “{render.plain(query)}”.", visible=True)
    return listed, gr.update(value="", visible=False)


def switch_draft(drafts: dict[str, str], leaving: str | None, draft: str, opening: str | None) -> tuple:
    """The message box keeps an unsent draft per chat: the one left is kept, the one opened comes back (the page
    script puts it in the box only if nothing was typed there meanwhile: `TAKE_DRAFT`, `RESTORE_DRAFT`)."""
    drafts = dict(drafts or {})
    if draft and draft.strip():
        drafts[leaving or ""] = draft
    else:
        drafts.pop(leaving or "", None)
    return drafts.pop(opening or "", ""), drafts


# The box is emptied in the page at the click (its text goes to the server as the draft left), never by the reply.
TAKE_DRAFT = "(opening, leaving, draft, drafts) => [opening, leaving, localchatTakeDraft(), drafts]"
RESTORE_DRAFT = "(draft) => { localchatRestoreDraft(draft); return []; }"


def wire(w: Window, bar: Sidebar) -> None:
    """The sidebar's events (the model picker's are the Models panel's: models_panel.py)."""
    core, conv_id, message, drafts = w.core, w.conv_id, w.message, w.drafts

    def open_chat(cid: str | None, leaving: str | None, draft: str | None, drafts: dict[str, str],
                  request: gr.Request) -> tuple:
        w.opened(request, cid)
        return *w.load(cid), *switch_draft(drafts, leaving, draft or "", cid)

    def open_new_chat(leaving: str | None, draft: str | None, drafts: dict[str, str], request: gr.Request) -> tuple:
        w.opened(request, None)
        return *w.new_chat(request), *switch_draft(drafts, leaving, draft or "", None)

    def delete(cid: str | None, request: gr.Request) -> tuple:
        w.opened(request, None)
        if cid:
            w.underway.forget(cid)  # before the answer stops: no waiting message is sent to a deleted chat
            core.stop(cid)
            w.store.delete(cid)
        return (*w.new_chat(request), gr.update(visible=False))

    def rename(title: str, cid: str | None, request: gr.Request) -> tuple:
        if cid and title and title.strip():
            core.rename(cid, title)
        return w.conversations(cid, request), titled(cid)

    def titled(cid: str | None) -> str:
        """The rename box holds the open chat's title, to be edited (it started empty: a rename meant retyping)."""
        conv = w.store.get(cid) if cid else None
        return conv.title if conv is not None else ""

    def search(query: str, cid: str | None, request: gr.Request) -> tuple:
        w.searched(request, query)  # the list's later updates keep to it
        return searched(w.store, query, cid)

    chat_state = w.chat_state
    bar.convs.input(open_chat, [bar.convs, conv_id, message, drafts], [*chat_state, bar.restore, drafts],
                    api_name=False, js=TAKE_DRAFT).then(None, [bar.restore], None, js=RESTORE_DRAFT, api_name=False)
    bar.new.click(open_new_chat, [conv_id, message, drafts], [*chat_state, bar.convs, bar.restore, drafts],
                  api_name=False, js="(leaving, draft, drafts) => [leaving, localchatTakeDraft(), drafts]").then(
        None, [bar.restore], None, js=RESTORE_DRAFT, api_name=False)
    # The chat's own trash icon deletes, as the sidebar's Delete does: it asks first, the chat shown
    # again meanwhile (the icon blanks the view in the page before it asks the server anything).
    w.chatbot.clear(lambda cid: (*w.view(cid), gr.update(visible=cid is not None)), [conv_id],
                    [*w.chat_outputs, bar.confirm], api_name=False)
    bar.theme.click(None, None, None, js="() => localchatToggleTheme()", api_name=False)
    # Every change of the search, a deletion included (Backspace sends no input event to Gradio's textbox).
    bar.search.change(search, [bar.search, conv_id], [bar.convs, bar.no_match], api_name=False,
                      trigger_mode="always_last")
    bar.rename.submit(rename, [bar.rename, conv_id], [bar.convs, bar.rename], api_name=False)
    conv_id.change(titled, [conv_id], [bar.rename], api_name=False, queue=False)
    bar.delete.click(lambda cid: gr.update(visible=cid is not None), [conv_id], [bar.confirm], api_name=False)
    bar.delete_no.click(lambda: gr.update(visible=False), None, [bar.confirm], api_name=False)
    bar.delete_yes.click(delete, [conv_id], [*chat_state, bar.convs, bar.confirm], api_name=False)
