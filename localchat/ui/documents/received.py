"""What the browser sends before an event uses it: the window's upload route, limited and kept small.

Gradio's upload route writes each file into the received folder; the page then names it in the event
that uses it (attach, import), which deletes it (composer.attach, model_import.import_gguf). What no
event claims (a page closed half-way, a client posting on its own) must not pile up, so after every
upload the folder is pruned: at most WAITING_FILES files and WAITING_BYTES bytes wait there, the
oldest going first (the request's own files stay), and none waits longer than ABANDONED_S.

The route takes a model's size, for the import; a file of any other kind is a document and keeps the
documents' limit, and no upload may fill the disk.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

from starlette.concurrency import run_in_threadpool
from starlette.responses import PlainTextResponse

from ...paths import DISK_MARGIN
from ...units import size_text
from .uploads import MAX_UPLOAD_BYTES, too_large

UPLOAD_ROUTE = "/gradio_api/upload"
# The window's upload limit, set by what an import may bring: a 4-bit 405B model is ~230 GB. Documents
# keep their own 50 MB limit (uploads.store_upload), checked once they have arrived.
MAX_IMPORT_BYTES = 256 * 2**30
WAITING_FILES = 16  # an upload waits for its event only a moment: more than this are left behind
WAITING_BYTES = 256 * 2**20  # five documents at their limit (a bigger import is its own request's file)
ABANDONED_S = 600.0
PARTIAL_IDLE_S = 60.0  # a file still being written is touched all the time; one left by a broken connection is not

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Callable, Callable], Awaitable[None]]


def file_limit(name: str) -> int:
    """The most bytes one received file may have: a model's size for a GGUF to import, else a document's."""
    return MAX_IMPORT_BYTES if name.lower().endswith(".gguf") else MAX_UPLOAD_BYTES


def prune(folder: Path, keep: frozenset[str] = frozenset()) -> None:
    """Bound what waits in `folder` (see the module's words); `keep`: the paths the current request received."""
    now, top = time.time(), os.path.realpath(folder)  # the paths Gradio answers with are compared as real ones
    keep = frozenset(os.path.realpath(p) for p in keep)
    waiting: list[tuple[float, int, str]] = []
    for root, dirs, files in os.walk(top, topdown=False):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            # At the top: Gradio's file for an upload in progress, one a broken connection left, or the empty
            # file its upload components make (and never delete) for each file they take.
            if root == top:
                if now - st.st_mtime > PARTIAL_IDLE_S:
                    _remove(path)
            else:  # a finished upload, in the folder Gradio names by its checksum
                waiting.append((st.st_mtime, st.st_size, path))
    count = total = 0
    for mtime, size, path in sorted(waiting, key=lambda w: (w[2] in keep, w[0]), reverse=True):  # own, then newest
        count, total = count + 1, total + size
        if path not in keep and (count > WAITING_FILES or total > WAITING_BYTES or now - mtime > ABANDONED_S):
            _remove(path)
    for root, dirs, _ in os.walk(top, topdown=False):
        for name in dirs:
            try:
                os.rmdir(os.path.join(root, name))  # only an empty one goes
            except OSError:
                pass


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class UploadLimits:
    """ASGI middleware around the upload route: the size limits, then the prune."""

    def __init__(self, app: ASGIApp, folder: Path) -> None:
        self.app, self.folder = app, folder
        # The bytes of the uploads in flight: each is counted against the disk beside them, not only
        # against what is free when it arrives (two at once both fit alone, and filled the disk together).
        self._reserved = 0
        self._lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Callable, send: Callable) -> None:
        path = "/" + "/".join(part for part in str(scope.get("path", "")).split("/") if part)
        if scope["type"] != "http" or scope.get("method") != "POST" or path != UPLOAD_ROUTE:
            await self.app(scope, receive, send)
            return
        refusal = await run_in_threadpool(self.refusal, scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        held, counted = _Held(), _Counted(receive, scope)
        received: list[str] = []
        try:
            await self.app(scope, counted, held.send)
            received = held.paths()
            refusal = counted.refusal() or await run_in_threadpool(self.over_limit, received)
        finally:
            with self._lock:
                self._reserved -= _length(scope)
            await run_in_threadpool(prune, self.folder, frozenset(received if refusal is None else ()))
        await (refusal or held.replay)(scope, receive, send)

    def refusal(self, scope: Scope) -> PlainTextResponse | None:
        """A 411 or 413 before the body is read, when its length is unknown or more than could be kept."""
        length = dict(scope.get("headers", [])).get(b"content-length", b"")
        if not length.isdigit():
            return PlainTextResponse("an upload must say its size (Content-Length).", status_code=411)
        size = int(length)
        with self._lock:  # asked and reserved at once: two uploads never both take the same room
            room = shutil.disk_usage(self.folder).free - DISK_MARGIN - self._reserved
            fits = size <= MAX_IMPORT_BYTES and size <= room
            self._reserved += size if fits else 0
        if fits:
            return None
        if size > MAX_IMPORT_BYTES:
            return PlainTextResponse(f"the upload is {size_text(size)}, over the {size_text(MAX_IMPORT_BYTES)} limit "
                                     "of a model import.", status_code=413)
        # How much is free stays unsaid: with --listen this answer comes before the login.
        return PlainTextResponse(f"the upload is {size_text(size)}, more than the disk holding localchat's data "
                                 f"has room for beside the uploads under way (keeping {size_text(DISK_MARGIN)} free); "
                                 "free some space or wait for them, and try again.", status_code=413)

    def over_limit(self, received: list[str]) -> PlainTextResponse | None:
        """A 413 when a received file is over the limit of its kind; then every file of the request is deleted."""
        for path in received:
            name = Path(path).name
            size = os.lstat(path).st_size if os.path.lexists(path) else 0
            if size > file_limit(name):
                for other in received:
                    _remove(other)
                return PlainTextResponse(f"{too_large(name, size)} Only a GGUF model (.gguf) to import may be "
                                         "larger.", status_code=413)
        return None


class _Counted:
    """The upload's body as the route reads it, each file's bytes counted as they arrive: a document past its
    limit ends the upload there, not once it is written whole. The route is then sent the end of a multipart
    body that does not parse, so it deletes the part files it began (Gradio does so on any parse error)."""

    NAME = b'filename="'

    def __init__(self, receive: Callable, scope: Scope) -> None:
        self.receive = receive
        kind = dict(scope.get("headers", [])).get(b"content-type", b"")
        self.boundary = kind.partition(b"boundary=")[2].split(b";")[0].strip(b'" ')
        self.name, self.count, self.tail = "", 0, b""
        self.over: tuple[str, int] | None = None

    async def __call__(self) -> dict[str, Any]:
        message = await self.receive()
        if self.over is None and message.get("type") == "http.request":
            self._count(message.get("body", b""))
            if self.over is not None:
                # A new part whose first header line is empty: the parser stops there, as on any broken body.
                return {"type": "http.request", "body": b"\r\n--" + self.boundary + b"\r\n:\r\n", "more_body": False}
        return message

    def _count(self, chunk: bytes) -> None:
        data, new = self.tail + chunk, len(self.tail)
        counted, at = new, 0
        while (start := data.find(self.NAME, at)) >= 0 and (end := data.find(b'"', start + len(self.NAME))) >= 0:
            at = end + 1
            if end < new:  # a part's header read with the chunk before
                continue
            self._add(max(0, start - counted))  # the part before ends where this header begins
            self.name, self.count, counted = data[start + len(self.NAME):end].decode("utf-8", "replace"), 0, end + 1
        self._add(len(data) - max(counted, new))
        self.tail = data[-512:]

    def _add(self, size: int) -> None:
        self.count += size
        if self.over is None and self.name and self.count > file_limit(self.name) + 4096:  # + the part's own lines
            self.over = (self.name, self.count)

    def refusal(self) -> PlainTextResponse | None:
        if self.over is None:
            return None
        name, size = self.over
        return PlainTextResponse(f"{too_large(name, size)} Only a GGUF model (.gguf) to import may be larger.",
                                 status_code=413)


def _length(scope: Scope) -> int:
    """The Content-Length of a request the limits let through (reserved by `refusal`)."""
    return int(dict(scope.get("headers", [])).get(b"content-length", b"0"))


class _Held:
    """A response kept back until the files it names are checked."""

    def __init__(self) -> None:
        self.start: dict[str, Any] | None = None
        self.body = bytearray()

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.start = message
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")

    def paths(self) -> list[str]:
        """The files a successful upload answered with (Gradio's JSON list of paths inside the folder)."""
        if self.start is None or self.start["status"] != 200:
            return []
        try:
            answer = json.loads(self.body)
        except ValueError:
            return []
        return [p for p in answer if isinstance(p, str)] if isinstance(answer, list) else []

    async def replay(self, scope: Scope, receive: Callable, send: Callable) -> None:
        if self.start is not None:
            await send(self.start)
            await send({"type": "http.response.body", "body": bytes(self.body)})
