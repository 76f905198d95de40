"""The sidebar's "Export and import": the chat shown as Markdown or JSON, every chat as JSON, and an
export read back as new chats (transfer.py does the work; this is the window's part)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import gradio as gr

from ...errors import LocalchatError
from ..chat.store import Store
from ..chat.transfer import export_file, file_name, import_json, to_json, to_markdown
from ..documents.uploads import received_dir


def build_transfer(store: Store, conv_id: gr.State, convs: gr.Radio,
                   conversations: Callable[[str | None], dict[str, Any]]) -> None:
    """The components (inside the sidebar being built) and their events."""
    with gr.Accordion("Export and import", open=False, elem_id="transfer"):
        with gr.Row():
            as_markdown = gr.Button("Markdown", size="sm", elem_id="export-markdown", min_width=60)
            as_json = gr.Button("JSON", size="sm", elem_id="export-json", min_width=60)
            every = gr.Button("All chats", size="sm", elem_id="export-all", min_width=60)
        exported = gr.File(label="Exported", visible=False, interactive=False, elem_id="exported")
        upload = gr.UploadButton("Import chats (JSON)", file_types=[".json"], file_count="single", size="sm",
                                 elem_id="import")

    def export(cid: str | None, kind: str) -> dict[str, Any]:
        if kind == "all":
            chats = [c for c in (store.get(s.id) for s in store.list()) if c is not None]
            if not chats:
                gr.Warning("there is no chat to export yet.")
                return gr.update(visible=False)
            return gr.update(value=str(export_file(received_dir(), "localchat-chats.json", to_json(chats))),
                             visible=True)
        conv = store.get(cid) if cid else None
        if conv is None:
            gr.Warning("open a chat to export it (or export all chats).")
            return gr.update(visible=False)
        text, suffix = (to_markdown(conv), ".md") if kind == "markdown" else (to_json([conv]), ".json")
        return gr.update(value=str(export_file(received_dir(), file_name(conv.title, suffix), text)), visible=True)

    def take(file: Any, cid: str | None) -> dict[str, Any]:
        path = getattr(file, "name", file)
        try:
            ids = import_json(store, Path(path).read_bytes())
        except (LocalchatError, OSError) as exc:
            gr.Warning(f"nothing was imported: {exc}")
            return gr.skip()
        gr.Info(f"Imported {len(ids)} chat{'s' if len(ids) != 1 else ''}.")
        return conversations(cid)

    # One click: the file is offered for download as soon as it is made (its link stays, to save it again).
    for button, kind in ((as_markdown, "markdown"), (as_json, "json"), (every, "all")):
        button.click(lambda cid, kind=kind: export(cid, kind), [conv_id], [exported], api_name=False).then(
            None, None, None, js="() => document.querySelector('#exported a[download]')?.click()")
    upload.upload(take, [upload, conv_id], [convs], api_name=False)
