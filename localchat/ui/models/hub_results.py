"""A hub search's files with the planner's verdict for this machine, without Gradio.

A repo outside the catalog has no facts in models.yaml: its smallest file's header, read from the hub by
byte ranges, gives them (one header a repo: its quant files share the architecture), and each file is then
judged by the same verdict() the catalog rows use, with the file's own size from the listing.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from ...errors import LocalchatError
from ...hardware import HardwareInfo
from ...models.catalog import ModelFacts, facts_from_gguf
from ...models.fan_out import fan_out
from ...models.hub_header import read_hub_gguf
from ...models.hub_search import HubGGUF, HubRepo, HubSearch
from .model_browser import Verdict, shown_profile, size_text, verdict, wants_for

log = logging.getLogger(__name__)

HEADERS_DEADLINE = 20.0  # for every repo's header together; a late one is "not known", not a wait
WORKERS = 4


@dataclass(slots=True)
class HubRow:
    """One hub file as the search results show it."""

    choice: str
    repo: str
    filename: str
    quant: str
    size: str
    verdict: Verdict


def facts_of(repo: HubRepo, timeout: float) -> ModelFacts:
    """The repo's model facts from its smallest file's header (keyed apart from every catalog key)."""
    smallest = repo.files[0]
    info = read_hub_gguf(repo.repo, smallest.filename, timeout=timeout)
    if info.n_layer <= 0 or info.n_head_kv <= 0 or info.head_dim <= 0:
        raise LocalchatError(f"the header of {smallest.filename} has no layer or head counts the planner can use")
    facts = facts_from_gguf(info, f"hub:{repo.repo}", smallest.size, family="hub")
    facts.name = repo.repo  # the header's general.name is the uploader's words: the repo id is what was checked
    facts.exact_layer_bytes = {smallest.quant: facts.exact_layer_bytes[info.quant]} if (
        info.quant in facts.exact_layer_bytes and info.quant == smallest.quant) else {}
    return facts


def file_verdict(hardware: HardwareInfo, catalog: dict[str, ModelFacts], facts: ModelFacts, file: HubGGUF,
                 wants) -> Verdict:  # noqa: ANN001 - planner Wants
    """The catalog rows' verdict() over this one file, its size the listing's."""
    alone = dataclasses.replace(facts, files={file.quant: file.model_file()}, default_quant=file.quant,
                                exact_layer_bytes={q: b for q, b in facts.exact_layer_bytes.items() if q == file.quant})
    return verdict(hardware, {**catalog, facts.key: alone}, facts.key, file.quant, wants)


def hub_rows(search: HubSearch, hardware: HardwareInfo, catalog: dict[str, ModelFacts],
             timeout: float = 5.0, deadline: float = HEADERS_DEADLINE) -> list[HubRow]:
    """Every file the search found, with its verdict; a repo whose header could not be read says why."""
    wants = wants_for(shown_profile(hardware))
    facts = _headers(search.repos, timeout, deadline)
    rows = []
    for repo in search.repos:
        known = facts.get(repo.repo)
        for file in repo.files:
            if isinstance(known, ModelFacts):
                said = file_verdict(hardware, catalog, known, file, wants)
            else:
                why = known or "it was not read in time"
                said = Verdict("not known", f"the planner needs this model's header, and {why}")
            rows.append(HubRow(file.choice, repo.repo, file.filename, file.quant, size_text(file.size), said))
    return rows


def _headers(repos: list[HubRepo], timeout: float, deadline: float) -> dict[str, ModelFacts | str]:
    """Each repo's facts, or why not; a few repos at a time, all within `deadline`."""
    return {repo.repo: answer for repo, answer in fan_out(repos, lambda repo: _header(repo, timeout),
                                                           workers=WORKERS, deadline=deadline,
                                                           name="localchat-hub-header")}


def _header(repo: HubRepo, timeout: float) -> ModelFacts | str:
    """A repo's facts, or why they could not be read."""
    try:
        return facts_of(repo, timeout)
    except Exception as exc:  # a hub error, a damaged or hostile header: this repo only
        log.info("no header for %s: %s", repo.repo, exc)
        return f"reading it failed: {exc}" if isinstance(exc, LocalchatError) else (
            f"reading it failed ({type(exc).__name__})")
