"""The Models panel's hub search: any GGUF repo on the model hub, each quant file with its size and what the
planner says of it here; a file found is offered in the panel's File to download, on the catalog's path."""

from __future__ import annotations

import time
from collections import OrderedDict
from html import escape
from typing import Any, Callable

import gradio as gr

from ...models.catalog import ModelFacts
from ...models.hub_search import MAX_QUERY, HubGGUF, HubSearch, search_gguf
from ..models.hub_results import HubRow, hub_rows
from ..models.model_browser import machine, size_text
from ..models.models_html import STYLE, USABLE_TPS, rate

SEARCH_S = 30.0  # the whole search, headers included: past it the late repos' verdicts say "not known"
KEPT = 200  # hub files a client may ask to download: those of the latest searches, oldest dropped


def hub_table(search: HubSearch, rows: list[HubRow]) -> str:
    """The search's files grouped by repo; the verdict's reasons are its tooltip (every hub text escaped)."""
    note = f"<p class='lc-no' id='hub-message'>{escape(search.message)}</p>" if search.message else ""
    if not rows:
        return STYLE + note
    head = "".join(f"<th>{h}</th>" for h in ("Repo", "File", "Quant", "Size", "This machine", "Predicted"))
    body = []
    for row in rows:
        said, tps = row.verdict.short, row.verdict.decode_tps
        fits = said.startswith("fits") and not (tps is not None and 0 < tps < USABLE_TPS)
        body.append(f"<tr data-choice='{escape(row.choice)}'><td>{escape(row.repo)}</td><td>{escape(row.filename)}</td>"
                    f"<td>{escape(row.quant)}</td><td class='lc-num'>{escape(row.size)}</td>"
                    f"<td title='{escape(row.verdict.detail)}' class='{'' if fits else 'lc-no'}'>{escape(said)}</td>"
                    f"<td class='lc-num'>{rate(tps) if tps else '–'}</td></tr>")
    return (f"{STYLE}{note}<div class='lc-table-wrap'><table class='lc-table'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div><p class='lc-no'>Choose a file in <b>File to download</b> "
            "below to fetch it (checked against the hub's sha256; Pause and Resume work as for the catalog).</p>")


class HubSearchPanel:
    """Built inside the Models panel's Blocks; `found` holds the files a client may ask to download."""

    def __init__(self, catalog: Callable[[], dict[str, ModelFacts]]) -> None:
        self.catalog = catalog
        self.found: OrderedDict[str, HubGGUF] = OrderedDict()
        self.latest: list[str] = []  # the latest search's files, listed first in its own order
        with gr.Row(equal_height=True, elem_id="hub-search-row"):
            self.query = gr.Textbox(label="Search the model hub for any GGUF model", max_length=MAX_QUERY,
                                    placeholder="e.g. qwen2.5 7b instruct", scale=1, elem_id="hub-query")
            self.button = gr.Button("Search", scale=0, min_width=100, elem_id="hub-search")
        self.results = gr.HTML(elem_id="hub-results")

    def labels(self) -> list[tuple[str, str]]:
        """The found files as File to download lists them: the latest search's first, then earlier ones."""
        names = [n for n in self.latest if n in self.found] + [n for n in reversed(self.found) if n not in self.latest]
        return [(f"{self.found[n].repo} {self.found[n].filename} ({size_text(self.found[n].size)})", n) for n in names]

    def search(self, query: str | None) -> str:
        """The results table; what it lists becomes downloadable (it runs in Gradio's worker threads, bounded)."""
        started = time.monotonic()
        found = search_gguf(query or "")
        rows = hub_rows(found, machine(), self.catalog(), deadline=max(5.0, SEARCH_S - (time.monotonic() - started)))
        self.latest = [file.choice for repo in found.repos for file in repo.files]
        for repo in found.repos:
            for file in repo.files:
                self.found[file.choice] = file
                self.found.move_to_end(file.choice)
        while len(self.found) > KEPT:
            self.found.popitem(last=False)
        return hub_table(found, rows)

    def wire(self, choice: gr.Dropdown, choice_update: Callable[[str | None], dict[str, Any]]) -> None:
        """Search on Enter or the button: the table and File to download's new entries (its value kept) come
        in one update, so the list never lags the table."""
        def search(query: str | None, chosen: str | None) -> tuple[str, dict[str, Any]]:
            return self.search(query), choice_update(chosen)

        for event in (self.query.submit, self.button.click):
            event(search, [self.query, choice], [self.results, choice], api_name=False, concurrency_limit=4)
