"""Uploads share one disk: an upload's bytes are reserved while it arrives, so two at once never both take the
same room (they filled the disk that holds the chats), and a document is held to its 50 MB limit while it
streams, its partial file deleted, rather than written whole first."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from localchat.ui.documents import received
from localchat.ui.documents.received import UploadLimits
from localchat.ui.documents.uploads import MAX_UPLOAD_BYTES

BOUNDARY = "localchat-test-boundary"


def scope(size: int) -> dict:
    return {"type": "http", "method": "POST", "path": received.UPLOAD_ROUTE,
            "headers": [(b"content-length", str(size).encode()),
                        (b"content-type", f"multipart/form-data; boundary={BOUNDARY}".encode())]}


def writer(folder: Path):
    """The upload route as far as the disk sees it: the body written to a file of its own as it arrives
    (Gradio writes each part so), then that file's path answered."""
    count = iter(range(100))

    async def app(scope: dict, receive, send) -> None:
        path = folder / f"upload-{next(count)}"
        with path.open("wb") as out:
            while True:
                message = await receive()
                out.write(message.get("body", b""))
                out.flush()
                if not message.get("more_body"):
                    break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps([str(path)]).encode()})
    return app


def test_two_uploads_at_once_never_both_take_the_same_room(small_disk, monkeypatch):
    folder = small_disk("8m")
    monkeypatch.setattr(received, "DISK_MARGIN", 0)  # the tmpfs is the whole disk here
    limits = UploadLimits(writer(folder), folder)
    size = 5 * 2**20  # each fits the 8 MiB disk alone; the two together do not

    async def run() -> tuple[int, int, bytes]:
        release = asyncio.Event()

        async def slow() -> dict:  # the first upload: its first 64 KiB, then the rest once let go
            if not hasattr(slow, "began"):
                slow.began = True
                return {"type": "http.request", "body": bytes(65536), "more_body": True}
            await release.wait()
            return {"type": "http.request", "body": bytes(size - 65536), "more_body": False}

        async def whole() -> dict:
            return {"type": "http.request", "body": bytes(size), "more_body": False}

        answers: dict[str, list] = {"first": [], "second": []}

        def sink(which: str):
            async def send(message: dict) -> None:
                answers[which].append(message)
            return send

        first = asyncio.create_task(limits(scope(size), slow, sink("first")))
        while not (folder / "upload-0").exists():  # the first is arriving
            await asyncio.sleep(0.01)
        await limits(scope(size), whole, sink("second"))
        release.set()
        await first
        return answers["first"][0]["status"], answers["second"][0]["status"], answers["second"][1]["body"]

    first, second, said = asyncio.run(run())
    assert (first, second) == (200, 413), said
    assert b"room for beside the uploads under way" in said
    assert (folder / "upload-0").stat().st_size == size
    assert limits._reserved == 0  # given back when the upload ended


def test_a_document_over_its_limit_is_refused_while_it_streams(window):
    from localchat.ui.documents.uploads import received_dir

    before = {p.name for p in received_dir().iterdir()}
    declared = MAX_UPLOAD_BYTES + 10 * 2**20
    head = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"notes.txt\"\r\n"
            "Content-Type: text/plain\r\n\r\n").encode()
    parts = urlsplit(window.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=120) as conn:
        conn.sendall((f"POST /gradio_api/upload HTTP/1.1\r\nHost: {parts.netloc}\r\nOrigin: {window.url}\r\n"
                      f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
                      f"Content-Length: {declared}\r\n\r\n").encode() + head)
        sent = len(head)
        chunk = bytes(2**20)
        conn.settimeout(0.5)
        reply = b""
        started = time.monotonic()
        # The body never ends (10 MB of the declared length stay unsent): only a limit read while the bytes
        # arrive can answer.
        while sent < MAX_UPLOAD_BYTES + 2 * 2**20:
            try:
                conn.sendall(chunk)
                sent += len(chunk)
            except OSError:
                break  # the server answered and closed
        conn.settimeout(60)
        try:
            while b"\r\n\r\n" not in reply:
                more = conn.recv(65536)
                if not more:
                    break
                reply += more
        except TimeoutError:
            pytest.fail(f"no answer within 60 s of {sent} bytes sent ({time.monotonic() - started:.0f} s)")
    text = reply.decode("latin-1")
    assert text.startswith("HTTP/1.1 413"), text[:300]
    # Gradio's partial file of the part went with the parse it could not finish.
    deadline = time.monotonic() + 30
    while {p.name for p in received_dir().iterdir() if p.is_file()} - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not {p.name for p in received_dir().iterdir() if p.is_file()} - before
