"""The wizard with nothing to download (downloads refused, or no network): the model files already on this
machine are its candidates, the catalog's and the user's own alike, and what it tells its user is in the
words of where it runs (the command line names its flags, the window its own controls)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from ..errors import LocalchatError, ModelNotFoundError
from ..hardware import HardwareInfo
from ..models.catalog import ModelFacts, facts_from_gguf
from ..models.gguf_info import read_gguf
from ..models.importers import local_models
from ..planning.planner import Wants, plan
from ..runtime.gguf_types import pooling_key
from .candidates import Candidate, candidates_of, local_file, print_candidates


@dataclass(frozen=True, slots=True)
class Words:
    """What the wizard says where the command line and the window differ."""

    downloads_off: str  # why it measures only what is here, when downloads were refused
    nothing_here: str   # what to do when no model file is here at all
    keep_busy: str      # how to keep speeds measured beside busy programs


CLI = Words(downloads_off="Downloads off (--no-download)",
            nothing_here="Connect to the network and run `localchat tune` again, or `localchat pull` a model first.",
            keep_busy=" (`localchat tune --allow-busy` keeps such numbers, for a machine that is never idle)")
WINDOW = Words(downloads_off="Downloads off",
               nothing_here="Download a model in the Models panel, or allow the wizard to download one.",
               keep_busy="")
ALREADY_HERE = "already on this machine ("  # in the line that opens the measuring of the files here
NO_NETWORK = "No network"
DOWNLOADS_FAILED = "No download succeeded"


def _planned(key: str, quant: str, path: Path, facts: dict[str, ModelFacts], hardware: HardwareInfo,
             wants: Wants) -> Candidate | None:
    """`path` as a candidate with the planner's context, layout and prediction for it; None when it does not
    fit this machine."""
    alone = {key: replace(facts[key], files={quant: facts[key].files[quant]})}  # this one file alone
    try:
        found = candidates_of(plan(hardware, alone, wants), hardware, facts, wants)[0]
    except ModelNotFoundError:
        return None
    found.path, found.status = path, "local"
    return found


def _chat_model(path: Path, key: str) -> ModelFacts | None:
    """A GGUF's facts when it is a language model to chat with (an embedding model says how it pools)."""
    try:
        info = read_gguf(path)
        if not info.n_layer or pooling_key(info.arch) in info.metadata:
            return None
        return facts_from_gguf(info, key, path.stat().st_size)
    except (LocalchatError, OSError, ValueError):
        return None


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _files_here(facts: dict[str, ModelFacts], entries: dict[str, ModelFacts],
                include: list[Path]) -> dict[tuple[str, str], Path]:
    """Every chat model file here by (key, quant), each file once: the catalog's files, then the user's own
    (`include` and what the importers find), whose facts from their headers are added to `facts`."""
    paths: dict[tuple[str, str], Path] = {}
    for key, entry in entries.items():
        for quant, model_file in entry.files.items():
            path = None if model_file.is_checkpoint else local_file(entries, key, quant)
            if path is not None and key in facts and quant in facts[key].files:
                paths[(key, quant)] = path
    for path in [*include, *(m.path for m in local_models())]:
        if any(_same(path, known) for known in paths.values()):
            continue
        key, number = path.stem, 2
        while key in facts:  # a file named like a catalog model, or two files of one name
            key, number = f"{path.stem}-{number}", number + 1
        model = _chat_model(path, key)
        if model is not None:
            facts[key] = model
            paths[(key, model.default_quant)] = path
    return paths


def here_candidates(hardware: HardwareInfo, facts: dict[str, ModelFacts], entries: dict[str, ModelFacts],
                    wants: Wants, include: list[Path], max_measured: int, why: str, words: Words,
                    out: TextIO) -> list[Candidate]:
    """The model files here as candidates: the files in `include` (the window's loaded model) first, then the
    planner's picks among the others, `max_measured` in all (every included one at least)."""
    paths = _files_here(facts, entries, include)
    here = {key: replace(model, files={q: f for q, f in model.files.items() if (key, q) in paths})
            for key, model in facts.items()}
    try:
        ranked = candidates_of(plan(hardware, {k: m for k, m in here.items() if m.files}, wants), hardware, facts,
                               wants)
    except ModelNotFoundError:
        raise ModelNotFoundError(f"{why}, and no model file that fits this machine is here. "
                                 f"{words.nothing_here}") from None
    for c in ranked:
        c.path, c.status = paths[(c.key, c.quant)], "local"
    first = []
    for wanted in include:
        known = next((c for c in ranked if _same(c.path, wanted)), None)
        if known is None:  # beyond the planner's few alternatives: planned alone
            key, quant = next((k for k, p in paths.items() if _same(p, wanted)), (None, None))
            known = _planned(key, quant, paths[(key, quant)], facts, hardware, wants) if key else None
        if known is not None and known not in first:
            first.append(known)
    rest = []
    for c in ranked:
        if c not in first and not any(_same(c.path, other.path) for other in first + rest):
            rest.append(c)
    chosen = first + rest[:max(max_measured - len(first), 0)]
    print("plan (the models already here, predicted):", file=out)
    print_candidates(chosen, out)
    left = len(first) + len(rest) - len(chosen)
    count = f"the {len(chosen)} models" if len(chosen) > 1 else "the model"
    print(f"{why}: measuring {count} {ALREADY_HERE}{', '.join(c.label for c in chosen)})"
          + (f"; {left} more here not measured." if left else "."), file=out, flush=True)
    return chosen
