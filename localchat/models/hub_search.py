"""Searching the model hub for GGUF repos beyond the catalog: each repo's quant files with their sizes.

The hub's answers are untrusted input: a repo id or file name becomes a path in the hub cache and text in
the window, so only plain ones are kept (the rest are counted, never shown). A search is bounded in results
and in time, and an unreachable hub is one line that says so, never an exception.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field

from .catalog import QUANT_BITS, ModelFile
from .fan_out import fan_out
from .hub import hub_endpoint
from .hub_errors import network_errors

MAX_REPOS = 8          # repos a search shows: the most downloaded first, so the first few are what people use
MAX_FILES = 24         # quant files shown per repo (real GGUF repos hold up to ~25)
MAX_QUERY = 80         # characters of a search
TIMEOUT = 5.0          # per request
DEADLINE = 20.0        # for the whole search, listings of every repo included
MAX_SIZE = 2 * 10**12  # no single GGUF file is larger: a bigger claimed size is a hostile listing
WORKERS = 4

# What the hub itself allows in a repo id (owner/name, letters, digits, '-', '_', '.'), never '..' or '--'.
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
# A file name: plain characters, '/' between folders, a .gguf end; nothing a shell, a path or HTML reads.
_FILE_NAME = re.compile(r"[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*\.gguf", re.IGNORECASE)
# A shard of a split model ("-00001-of-00003.gguf") is not a model on its own; a vision projector neither.
_NOT_A_MODEL = re.compile(r"-\d{5}-of-\d{5}\.gguf$|(^|/)mmproj", re.IGNORECASE)
# The longest names first, so Q4_K_M is not read as Q4_K or Q4.
_QUANTS = sorted(QUANT_BITS, key=len, reverse=True)
_QUANT_IN_NAME = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(_QUANTS) + r")(?![A-Za-z0-9])", re.IGNORECASE)


@dataclass(slots=True)
class HubGGUF:
    """One quant file of a hub repo, as its listing gives it."""

    repo: str
    filename: str
    quant: str
    size: int

    @property
    def choice(self) -> str:
        """The name the window gives it: repo/file, as the hub's own addresses read."""
        return f"{self.repo}/{self.filename}"

    def model_file(self) -> ModelFile:
        """The file as the download path takes it: the hub's LFS sha256 is the checksum (no catalog one)."""
        return ModelFile(self.quant, self.filename, self.size,
                         sources=[{"hub": {"repo": self.repo, "file": self.filename, "verified": False}}])


@dataclass(slots=True)
class HubRepo:
    repo: str
    downloads: int
    files: list[HubGGUF] = field(default_factory=list)
    refused: int = 0  # file names the listing gave that are not plain GGUF paths


@dataclass(slots=True)
class HubSearch:
    """What a search found, and one line for the user when it found nothing or fell short."""

    query: str
    repos: list[HubRepo] = field(default_factory=list)
    message: str = ""
    refused_repos: int = 0  # repo ids the hub listed that are not plain owner/name ids


def plain_repo_id(repo: object) -> bool:
    return isinstance(repo, str) and bool(_REPO_ID.fullmatch(repo)) and ".." not in repo and "--" not in repo


def plain_gguf_name(name: object) -> bool:
    return (isinstance(name, str) and len(name) <= 200 and bool(_FILE_NAME.fullmatch(name))
            and not any(part in ("", ".", "..") or part.startswith(".") for part in name.split("/")))


def quant_of(filename: str) -> str:
    """The quant level a file's name says (the hub has no field for it); F16 when it says none."""
    found = _QUANT_IN_NAME.findall(filename.rsplit("/", 1)[-1])
    return found[-1].upper() if found else "F16"


def search_gguf(query: str, limit: int = MAX_REPOS, timeout: float = TIMEOUT, deadline: float = DEADLINE) -> HubSearch:
    """The most downloaded GGUF repos matching `query`, each with its quant files and sizes; never raises."""
    query = " ".join(query.split())[:MAX_QUERY]
    result = HubSearch(query)
    if not query:
        result.message = "Type a model name to search the hub, e.g. “qwen2.5 7b instruct”."
        return result
    endpoint, started = hub_endpoint(), time.monotonic()
    unreachable = _knock(endpoint, timeout)
    if unreachable is not None:
        result.message = _unreachable(endpoint, unreachable, deadline)
        return result
    listed = _bounded(lambda: _list_repos(endpoint, query, min(limit, MAX_REPOS)), deadline)
    if isinstance(listed, BaseException) or listed is None:
        result.message = _unreachable(endpoint, listed, deadline)
        return result
    ids = [(repo, downloads) for repo, downloads in listed if plain_repo_id(repo)]
    result.refused_repos = len(listed) - len(ids)
    repos = _files_of_all(endpoint, ids, timeout, max(0.0, deadline - (time.monotonic() - started)))
    result.repos = [repo for repo in repos if repo.files]
    missing = len(ids) - len(repos)
    if not result.repos:
        result.message = (f"No GGUF models on {endpoint} match “{query}”." if not missing else
                          _unreachable(endpoint, None, deadline))
    elif missing:
        result.message = f"{missing} more repos did not answer within {deadline:.0f} s; search again to retry them."
    return result


def _knock(endpoint: str, timeout: float) -> BaseException | None:
    """Whether the hub answers at all, in one request: the hub client retries a failed listing for ~25 s
    (backoff), too long for a search box to wait to say the network is down. Any HTTP answer will do."""
    from huggingface_hub import get_session

    try:
        get_session().head(endpoint + "/", timeout=timeout)
    except network_errors() as exc:
        return exc
    return None


def _list_repos(endpoint: str, query: str, limit: int) -> list[tuple[object, int]]:
    from huggingface_hub import HfApi

    found = HfApi(endpoint=endpoint).list_models(search=query, filter="gguf", sort="downloads", limit=limit)
    return [(info.id, int(info.downloads or 0)) for info in found]


def _files_of(endpoint: str, repo: str, downloads: int, timeout: float) -> HubRepo:
    """A repo's GGUF files with their sizes (the listing with file metadata: one request)."""
    from huggingface_hub import HfApi

    info = HfApi(endpoint=endpoint).model_info(repo, files_metadata=True, timeout=timeout)
    found = HubRepo(repo, downloads)
    for sibling in info.siblings or []:
        name, size = sibling.rfilename, sibling.size
        if not (isinstance(name, str) and name.lower().endswith(".gguf")) or _NOT_A_MODEL.search(name or ""):
            continue
        if not plain_gguf_name(name) or not isinstance(size, int) or not 0 < size < MAX_SIZE:
            found.refused += 1
        elif len(found.files) < MAX_FILES:
            found.files.append(HubGGUF(repo, name, quant_of(name), size))
    found.files.sort(key=lambda f: f.size)
    return found


def _files_of_all(endpoint: str, ids: list[tuple[str, int]], timeout: float, deadline: float) -> list[HubRepo]:
    """Each repo's files, a few at a time; a repo that fails (gone, private, nonsense) or is late is left out
    (in the hub's order)."""
    answered = fan_out(ids, lambda repo: _files_of(endpoint, *repo, timeout), workers=WORKERS, deadline=deadline,
                       name="localchat-hub-search")
    return [answer for _, answer in answered]


def _bounded(call, deadline: float):  # noqa: ANN001, ANN202 - a thunk and whatever it returns
    """`call()` in a daemon thread: its value, its exception, or None when it ran past `deadline`."""
    box: list[object] = []

    def run() -> None:
        try:
            box.append(call())
        except Exception as exc:
            box.append(exc)

    thread = threading.Thread(target=run, daemon=True, name="localchat-hub-search")
    thread.start()
    thread.join(deadline)
    return box[0] if box else None


def _unreachable(endpoint: str, exc: BaseException | None, deadline: float) -> str:
    """One line: what the hub did, and what to check."""
    if exc is None:
        return f"The model hub at {endpoint} did not answer within {deadline:.0f} s; check the network and try again."
    if isinstance(exc, network_errors()):
        return (f"Cannot reach the model hub at {endpoint} ({type(exc).__name__}); check the network, or "
                "HF_ENDPOINT and proxy settings. Models already downloaded still work.")
    status = getattr(getattr(exc, "response", None), "status_code", None)
    said = f"answered {status}" if status else f"gave an answer that is not a model list ({type(exc).__name__})"
    return f"The model hub at {endpoint} {said} to the search; try again later, or check HF_ENDPOINT."
