"""The window's Models panel: the catalog and what fits here, a hub search beyond it (hub_search_panel.py), the
files found on this machine with Load and Delete (asked first), downloads with progress (pause, resume,
cancel), import of a GGUF from the file picker, and switching with loading progress."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import gradio as gr

from ...errors import LocalchatError
from ...models.catalog import ModelFacts, load_catalog
from ...models.download import cached_file
from ...models.gguf_info import is_embedding_model
from ...models.importers import local_models
from ..chat.core import ChatCore
from ..models import local_files
from ..models.model_browser import Downloads, catalog_rows, choice_of, machine, size_text
from ..models.model_import import import_gguf
from ..models.models_html import catalog_table, local_table, progress_html
from .hub_search_panel import HubSearchPanel

log = logging.getLogger(__name__)

POLL_S = 0.5  # how often a running download or load redraws its progress


def model_choices(current: str, catalog: Callable[[], dict[str, ModelFacts]] = load_catalog,
                  earlier: list[str] | tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """The model picker's entries: the current model, the models served before it (`earlier`: the one the
    server started with may be a file no folder below holds), every GGUF file found (localchat's models folder,
    the hub cache, LM Studio, Ollama) and the catalog's files present here; each file once, under the first
    name found for it (a catalog name and the path of its file load the same model)."""
    names = [current, *earlier]
    files: dict[str, Path] = {}  # a catalog name -> its file here
    try:
        names += [str(m.path) for m in local_models() if not is_embedding_model(m.path)]  # they write no text
        for key, entry in sorted(catalog().items()):
            for q, f in entry.files.items():
                path = cached_file(f) if f.format == "gguf" else None
                if path is not None:
                    name = key if q == entry.default_quant else choice_of(key, q)
                    names.append(name)
                    files[name] = path
    except (LocalchatError, OSError) as exc:  # a broken catalog must not keep the window from opening
        log.warning("listing local models failed: %s", exc)
    by_file: dict[Path | str, str] = {}
    for name in names:
        where = files.get(name) or (Path(name) if name.lower().endswith(".gguf") else None)
        by_file.setdefault(where.resolve() if where is not None else name, name)
    # A file is listed by its name; the full path stays the value that loads it.
    return [(Path(n).name if n.lower().endswith(".gguf") else n, n) for n in by_file.values()]


class ModelsPanel:
    """Built inside the window's Blocks (its components land where it is called); `wire` adds the handlers."""

    def __init__(self, core: ChatCore, catalog: Callable[[], dict[str, ModelFacts]] = load_catalog) -> None:
        self.core, self.catalog = core, catalog
        self.downloads = Downloads()
        self._failed: dict[str, float] = {}  # model -> when it last failed to load (the picker may send it twice)
        gr.Markdown("Every model in the catalog, each quant with its size and what the planner says of it on "
                    "this machine; **Measured** is the hardware wizard's speed where it tuned that file.",
                    elem_id="models-intro")
        self.table = gr.HTML("<p>Reading the catalog and this machine…</p>", elem_id="catalog")
        self.hub = HubSearchPanel(self.catalog)  # any GGUF repo on the hub, downloaded through the row below
        with gr.Row(equal_height=True, elem_id="download-row"):
            self.choice = gr.Dropdown(label="File to download", choices=[], scale=1, min_width=280,
                                      elem_id="download-choice")
            # Off until a file is chosen: with nothing chosen there is nothing they could do.
            self.download_btn = gr.Button("Download", variant="primary", scale=0, min_width=100, elem_id="download",
                                          interactive=False)
            self.pause_btn = gr.Button("Pause", scale=0, min_width=80, elem_id="pause-download", interactive=False)
            self.resume_btn = gr.Button("Resume", scale=0, min_width=90, elem_id="resume-download",
                                        interactive=False)
            self.cancel_btn = gr.Button("Cancel", variant="stop", scale=0, min_width=90, elem_id="cancel-download",
                                        interactive=False)
        self.progress = gr.HTML(progress_html([]), elem_id="downloads")
        gr.Markdown("**Model files on this machine**: localchat's models folder, the hub cache, LM Studio, Ollama.")
        self.local = gr.HTML(elem_id="local-models")
        # A row's Load or Delete (models_html.py: _actions): the page script names the action and the row's path.
        self.action = gr.Textbox(elem_id="model-action", elem_classes="lc-hidden", show_label=False, container=False)
        self.action_go = gr.Button("Act", elem_id="model-action-go", elem_classes="lc-hidden")
        self.asked = gr.State(None)  # the path a Delete asked about, until Yes or No
        # Beside the Delete that asked (the page script places it), as the chat's delete asks.
        with gr.Column(visible=False, elem_id="model-delete-confirm") as self.confirm:
            self.question = gr.Markdown(elem_id="model-delete-question")
            with gr.Row():
                self.delete_yes = gr.Button("Delete", variant="stop", size="sm", elem_id="model-delete-yes")
                self.delete_no = gr.Button("Keep it", size="sm", elem_id="model-delete-cancel")
        self.importer = gr.File(label="Import a GGUF model file", file_types=[".gguf"], file_count="single",
                                height=110, elem_id="import-gguf")
        self.note = gr.Markdown(elem_id="models-note")

    # -- facts shown ----------------------------------------------------------------------------

    def files(self) -> dict[str, tuple[ModelFacts, str]]:
        """The catalog's downloadable files (GGUF) by window name: what a client may ask to download."""
        return {choice_of(key, q): (model, q) for key, model in self.catalog().items()
                for q, f in model.files.items() if f.format == "gguf"}

    def choice_update(self, value: str | None = None) -> dict[str, Any]:
        labels = [(f"{m.name} {q} ({size_text(m.files[q].size, m.files[q].verified)})", name)
                  for name, (m, q) in self.files().items()]
        return gr.update(choices=self.hub.labels() + labels, value=value)

    def refreshed(self) -> tuple:
        """The catalog table, the local files and the model picker, as they are now."""
        rows = catalog_rows(self.catalog(), machine(), self.downloads, self.loaded())
        return catalog_table(rows), *self.local_files()

    def local_files(self) -> tuple:
        """The local files table and the model picker (the catalog table plans every row: not for these)."""
        return self.local_html(), gr.update(choices=self.choices(), value=self.core.runtime.model)

    def local_html(self) -> str:
        return local_table(local_files.listed_files(self.core.runtime), self.loaded())

    def loaded(self) -> Path:
        """The file the window answers with now."""
        return Path(self.core.runtime.engine.worker.model_path)

    def choices(self) -> list[tuple[str, str]]:
        """The model picker's entries (model_choices) for the model loaded now."""
        return model_choices(self.core.runtime.model, self.catalog, self.core.runtime.earlier)

    def job_of(self, choice: str | None) -> str:
        # The name comes from the client: only a listed file (the catalog's, or one a hub search found).
        if not choice or (choice not in self.files() and choice not in self.hub.found):
            raise gr.Error("choose a file from the list first.", print_exception=False)
        return choice

    # -- handlers -------------------------------------------------------------------------------

    def follow(self) -> Iterator[tuple]:
        """Progress while any download runs, then the tables and the model picker once."""
        while any(job.running for job in self.downloads.all()):
            yield progress_html(self.downloads.all()), gr.skip(), gr.skip(), gr.skip()
            time.sleep(POLL_S)
        yield progress_html(self.downloads.all()), *self.refreshed()

    def download(self, choice: str | None) -> Iterator[tuple]:
        name = self.job_of(choice)
        if name in self.hub.found:
            self.downloads.start(name, self.hub.found[name].model_file())
        else:
            model, quant = self.files()[name]
            self.downloads.start(name, model.files[quant])
        yield from self.follow()

    def pause(self, choice: str | None) -> str:
        try:
            self.downloads.pause(self.job_of(choice))
        except LocalchatError as exc:
            gr.Warning(str(exc))
        return progress_html(self.downloads.all())

    def cancel(self, choice: str | None) -> Iterator[tuple]:
        try:
            self.downloads.cancel(self.job_of(choice))
        except LocalchatError as exc:
            gr.Warning(str(exc))
        yield from self.follow()

    def import_file(self, upload: str | None) -> tuple:
        if not upload:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip()
        try:
            placed = import_gguf(upload)
        except LocalchatError as exc:
            gr.Warning(str(exc))
            return "", gr.skip(), gr.skip(), None
        gr.Info(f"Imported {placed.path.name}; choose it in the Model list.")
        local, picker = self.local_files()
        return f"Imported **{placed.path.name}**: {placed.said}.", local, picker, None

    def act(self, request: str | None) -> Iterator[tuple]:
        """A row's Load (the picker's switch, with its progress) or Delete (asked first, beside the button)."""
        verb, _, path = (request or "").partition(":")
        skip = (gr.skip(),) * 4
        if verb not in ("load", "delete"):  # the page script sends only these
            yield *skip, gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
            return
        try:
            model = local_files.listed(self.core.runtime, path)
            question = local_files.delete_question(self.core.runtime, model) if verb == "delete" else ""
        except LocalchatError as exc:
            gr.Warning(str(exc))
            yield *skip, gr.update(visible=False), gr.skip(), gr.skip(), None, str(exc)
            return
        if verb == "delete":
            button = "Delete" if local_files.deletes_file(model) else "Remove"
            yield *skip, gr.update(visible=True), question, gr.update(value=button), str(model.path), ""
            return
        for shown in self.switch(str(model.path), listed=True):
            yield *shown, gr.update(visible=False), gr.skip(), gr.skip(), None, ""

    def delete(self, path: str | None) -> tuple:
        """Delete the file asked about (or take it off the list), and say which was done."""
        runtime = self.core.runtime
        try:
            said = local_files.delete(runtime, local_files.listed(runtime, path or ""))
        except (LocalchatError, OSError) as exc:
            gr.Warning(str(exc))
            return gr.update(visible=False), None, str(exc), gr.skip(), gr.skip()
        gr.Info(said)
        return gr.update(visible=False), None, said, *self.local_files()

    def switch(self, name: str, listed: bool = False) -> Iterator[tuple]:
        """Load the chosen model in the background; the current one answers until the new one is ready.
        `listed`: a file the local files list holds (its Load button), checked there."""
        core = self.core
        if not name or name == core.runtime.model or time.monotonic() - self._failed.get(name, -60) < 10:
            yield gr.skip(), core.status(), gr.skip(), gr.skip()
            return
        # The name comes from the client: only a model this window lists may load.
        if not listed and name not in {value for _, value in self.choices()}:
            raise gr.Error("that model is not in the list; choose one of the listed models, or start localchat "
                           "with --model to use another file.", print_exception=False)
        shown = Path(name).name
        size = Path(name).stat().st_size if Path(name).is_file() else 0
        failure: list[LocalchatError] = []

        def load() -> None:
            try:
                core.runtime.switch(name)
            except LocalchatError as exc:
                failure.append(exc)

        loader = threading.Thread(target=load, name="localchat-switch", daemon=True)
        started = time.monotonic()
        loader.start()
        while loader.is_alive():
            share = core.runtime.loading
            read = f"{share:.0%} read, " if share else ""
            yield gr.skip(), (f"Loading **{shown}**{f' ({size_text(size)})' if size else ''}… {read}"
                              f"{time.monotonic() - started:.0f} s so far; the current model answers meanwhile."), \
                gr.skip(), gr.skip()
            loader.join(POLL_S)
        if failure:
            self._failed[name] = time.monotonic()
            gr.Warning(f"{shown} did not load, so the current model stays: {failure[0]}")
        else:
            gr.Info(f"Now answering with {shown} (loaded in {time.monotonic() - started:.1f} s).")
        # Both tables again: the loaded file is marked in them, and a file that crashed the model runner is marked
        # in the local files.
        rows = catalog_rows(self.catalog(), machine(), self.downloads, self.loaded())
        yield gr.update(choices=self.choices(), value=core.runtime.model), core.status(), \
            self.local_html(), catalog_table(rows)

    # -- wiring ---------------------------------------------------------------------------------

    def wire(self, model: gr.Dropdown, status: gr.Markdown, demo: gr.Blocks) -> None:
        """The panel's events; `model` is the window's model picker and `status` its status line."""
        shown = [self.progress, self.table, self.local, model]
        # The bars are the progress: no spinner over the tables while a download runs.
        quiet = {"api_name": False, "concurrency_limit": None, "show_progress": "hidden"}
        buttons = [self.download_btn, self.pause_btn, self.resume_btn, self.cancel_btn]
        self.choice.change(lambda choice: [gr.update(interactive=bool(choice))] * len(buttons), [self.choice], buttons,
                           api_name=False, queue=False)
        self.hub.wire(self.choice, self.choice_update)
        self.download_btn.click(self.download, [self.choice], shown, **quiet)
        self.resume_btn.click(self.download, [self.choice], shown, **quiet)
        self.pause_btn.click(self.pause, [self.choice], [self.progress], **quiet)
        self.cancel_btn.click(self.cancel, [self.choice], shown, **quiet)
        self.importer.upload(self.import_file, [self.importer], [self.note, self.local, model, self.importer],
                             api_name=False, concurrency_limit=1)
        # The status line shows the load as it goes: no spinner over it.
        model.input(self.switch, [model], [model, status, self.local, self.table], api_name=False,
                    concurrency_limit=1, show_progress="hidden")
        asking = [self.confirm, self.question, self.delete_yes, self.asked, self.note]
        self.action_go.click(self.act, [self.action], [model, status, self.local, self.table, *asking], api_name=False,
                             concurrency_limit=1, show_progress="hidden",
                             js="(request) => [window.localchatModelAction || '']")
        self.delete_no.click(lambda: (gr.update(visible=False), None), None, [self.confirm, self.asked], api_name=False)
        self.delete_yes.click(self.delete, [self.asked], [self.confirm, self.asked, self.note, self.local, model],
                              api_name=False, concurrency_limit=1)
        # Another tab's download shows here too, and keeps moving while it runs.
        demo.load(lambda: self.choice_update(), None, [self.choice], api_name=False).then(
            self.follow, None, shown, **quiet)
