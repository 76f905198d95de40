"""File sizes from the model hub for the catalog's unverified entries, cached for a day; offline keeps the catalog's.

The catalog's hub sizes are rounded listing figures (`verified: false`); the planner's memory
estimate is only as good as the weights' size, so before planning the caller asks the hub for
exact sizes. `plan()` itself stays pure: it only ever sees the facts handed to it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import cache_dir
from .catalog import ModelFacts, ModelFile
from ..gptq import REQUIRED_FILES
from .checkpoints import checkpoint_files
from .fan_out import fan_out
from .hub import hub_endpoint
from .hub_errors import network_errors
from .split_files import part_names

log = logging.getLogger(__name__)

CACHE_FILE = "hub_sizes.json"
MAX_AGE = 24 * 3600      # a listing changes when a repo is re-uploaded: rarely
TIMEOUT = 5.0            # per request: the plan must not wait long for an unreachable hub
DEADLINE = 15.0          # for all requests together
WORKERS = 8
Repo = tuple[str, str]   # (repo, revision)
CHECKPOINT_MARK = REQUIRED_FILES[0]  # config.json: a listing that names it lists a checkpoint


@dataclass(slots=True)
class SizeRefresh:
    """The facts with hub sizes applied, and what to tell the user about them."""

    facts: dict[str, ModelFacts]
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    changed: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # (key, quant) -> (old, new)
    unreachable: bool = False  # the hub was asked and did not answer, or HF_HUB_OFFLINE forbids asking it


def _wanted(facts: dict[str, ModelFacts]) -> dict[Repo, set[str]]:
    """Repos and file names whose sizes the catalog could not verify (a checkpoint counts by its config.json:
    its size is that of all its files the listing names)."""
    found: dict[Repo, set[str]] = {}
    for model in facts.values():
        for quant in model.files.values():
            names = [CHECKPOINT_MARK] if quant.is_checkpoint else part_names(quant.repo_file or "")
            if quant.repo and all(names) and not quant.verified:
                found.setdefault((quant.repo, quant.revision), set()).update(names)
    return found


def _listed_size(qf: ModelFile, listed: dict[str, int]) -> int | None:
    """The size the repo listing gives a catalog file: one file's, a split model's parts together, or a
    checkpoint's files together."""
    if qf.is_checkpoint:
        return sum(checkpoint_files(listed).values()) if CHECKPOINT_MARK in listed else None
    parts = [listed.get(name) for name in part_names(qf.repo_file or "")]
    return None if None in parts else sum(parts)  # type: ignore[arg-type]


def _cache_path() -> Path:
    return cache_dir() / CACHE_FILE


def _read_cache() -> dict[str, dict]:
    try:
        data = json.loads(_cache_path().read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}  # missing or damaged: it is only a cache


def _write_cache(cache: dict[str, dict]) -> None:
    path = _cache_path()
    partial = path.with_name(path.name + f".{os.getpid()}.partial")
    try:
        partial.write_text(json.dumps(cache, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(partial, path)
    except OSError as exc:  # a read-only cache dir costs a request next time, nothing more
        log.info("could not write %s: %s", path, exc)


def _key(endpoint: str, repo: Repo) -> str:
    return f"{endpoint} {repo[0]}@{repo[1]}"


def _ask(endpoint: str, repo: Repo, timeout: float) -> dict:
    """One listing: {'sizes': {file: bytes}} or {'error': why, 'network': whether the hub was unreachable}."""
    from huggingface_hub import HfApi

    try:
        info = HfApi(endpoint=endpoint).model_info(repo[0], revision=repo[1], files_metadata=True, timeout=timeout)
    except network_errors() as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "network": True}
    except Exception as exc:  # 404, 401, a proxy's HTML page: this repo only
        status = getattr(getattr(exc, "response", None), "status_code", None)
        return {"error": f"answered {status}" if status else f"{type(exc).__name__}: {exc}", "network": False}
    return {"sizes": {s.rfilename: int(s.size) for s in info.siblings or [] if s.size}}


def _ask_all(endpoint: str, repos: list[Repo], timeout: float, deadline: float) -> dict[Repo, dict]:
    """Listings for `repos`: the first alone (an offline machine then costs one failure), the rest in parallel."""
    answers: dict[Repo, dict] = {repos[0]: _ask(endpoint, repos[0], timeout)}
    if answers[repos[0]].get("network"):
        return answers
    answers |= dict(fan_out(repos[1:], lambda repo: _ask(endpoint, repo, timeout), workers=WORKERS,
                            deadline=deadline, name="localchat-hub-sizes"))
    return answers


def refresh_sizes(facts: dict[str, ModelFacts], *, network: bool = True, timeout: float = TIMEOUT,
                  deadline: float = DEADLINE, max_age: float = MAX_AGE) -> SizeRefresh:
    """`facts` with exact sizes for unverified hub files: from a day-old-at-most cached answer, else
    from the hub (HF_ENDPOINT); never raises. Offline, older cached answers beat the catalog's figures."""
    wanted = _wanted(facts)
    result = SizeRefresh(facts)
    forbidden = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    result.unreachable = forbidden and network
    if not wanted:
        return result
    endpoint = hub_endpoint()
    cache, now = _read_cache(), time.time()
    stale = sorted(r for r in wanted if now - cache.get(_key(endpoint, r), {}).get("checked", 0) > max_age)
    offline = ""
    if stale and forbidden:
        offline = "HF_HUB_OFFLINE is set"
    elif stale and not network:
        offline = "asked not to use the network"
    elif stale:
        answers = _ask_all(endpoint, stale, timeout, deadline)
        unreachable = [a["error"] for a in answers.values() if a.get("network")]
        if unreachable or len(answers) < len(stale):
            offline = f"{endpoint} did not answer ({unreachable[0] if unreachable else f'within {deadline:.0f} s'})"
            result.unreachable = True
        refused = {r: a["error"] for r, a in answers.items() if not a.get("network") and "error" in a}
        for repo, answer in answers.items():
            if not answer.get("network"):  # a refusal is an answer too: do not ask again for a day
                cache[_key(endpoint, repo)] = {"checked": now, "sizes": answer.get("sizes", {}),
                                               **({"error": answer["error"]} if "error" in answer else {})}
        if answers:
            _write_cache(cache)
        if refused:
            result.warnings.append("the hub has no listing for " + ", ".join(f"{r[0]} ({why})" for r, why in
                                   sorted(refused.items())) + "; their catalog sizes are used.")
    result.facts = _apply(facts, endpoint, cache, result)
    total = sum(len(files) for files in wanted.values())
    known = sum(1 for r, files in wanted.items() for f in files if f in cache.get(_key(endpoint, r), {}).get("sizes", {}))
    if known:
        old = [r for r in wanted if now - cache.get(_key(endpoint, r), {}).get("checked", 0) > max_age]
        result.reasons.append(f"file sizes: {known} of {total} hub files as {endpoint} lists them"
                              + (" (some from older answers: the hub did not answer now)" if old else "")
                              + f"; {len(result.changed)} differ from the catalog.")
    if offline:
        result.warnings.append(f"file sizes not refreshed from the model hub: {offline}. Planning with the "
                               f"catalog's sizes for {total - known} of {total} files; memory estimates may be off "
                               "by a few percent.")
    return result


def _apply(facts: dict[str, ModelFacts], endpoint: str, cache: dict[str, dict],
           result: SizeRefresh) -> dict[str, ModelFacts]:
    """New facts objects (the caller's stay untouched) with the listed sizes."""
    updated = {}
    for key, model in facts.items():
        files = {}
        for quant, qf in model.files.items():
            listed = cache.get(_key(endpoint, (qf.repo, qf.revision)), {}).get("sizes", {}) if qf.repo else {}
            size = _listed_size(qf, listed) if not qf.verified else None
            if isinstance(size, int) and size > 0 and size != qf.size:
                result.changed[(key, quant)] = (qf.size, size)
                qf = dataclasses.replace(qf, size=size)
            files[quant] = qf
        updated[key] = dataclasses.replace(model, files=files)
    return updated


def apply_to_entries(entries: dict[str, ModelFacts], refreshed: SizeRefresh) -> None:
    """Give the caller's catalog the refreshed sizes in place, so a whole downloaded copy is recognised by
    its hub size and a download's size is announced right."""
    for (key, quant), (_, size) in refreshed.changed.items():
        entry = entries.get(key)
        if entry is not None and quant in entry.files:
            entry.files[quant].size = size
