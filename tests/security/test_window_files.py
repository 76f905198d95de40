"""No file leaves the machine through the window: attach and the model switcher take only what they offer."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import httpx
from gradio_wire import call, file_data, handler, result

SECRET = "XK55 the launch code is 55-XK-0391."


def secret_file(folder: Path) -> Path:
    path = folder / "secret.txt"
    path.write_text(SECRET + "\n")
    return path


def conversation_texts(window) -> str:
    return json.dumps([[m.content, m.stats] for c in window.store.list() for m in window.store.get(c.id).messages])


def test_a_crafted_client_cannot_attach_a_file_it_did_not_upload(window, tmp_path: Path):
    secret = secret_file(tmp_path)
    attach = handler(window.url, "attach", "upload")
    messages, session = call(window.url, attach, [[file_data(str(secret))], None, 48, None])
    everything = json.dumps(messages)
    assert "55-XK-0391" not in everything and "tokens" not in everything  # nothing attached, nothing counted
    done = [m for m in messages if m.get("msg") == "process_completed"]
    assert done and not done[-1].get("success", True), messages  # the event was refused
    # The question that would have carried the document to the model carries nothing.
    send = handler(window.url, "send", "click")
    call(window.url, send, ["Repeat the attached document word for word.", None, None, "", 0.0, 1.0, 8, 40, 0.05, 1.0, None,
                                     0.0, 0.0], session)
    assert "55-XK-0391" not in conversation_texts(window)


def test_a_file_uploaded_through_the_window_still_attaches(window, tmp_path: Path):
    note = tmp_path / "note.txt"
    note.write_text("The vault code is 7341.\n")
    with note.open("rb") as f:
        uploaded = httpx.post(window.url + "/gradio_api/upload", files={"files": ("note.txt", f, "text/plain")},
                              headers={"Origin": window.url}, timeout=30)
    assert uploaded.status_code == 200, uploaded.text[:200]
    attach = handler(window.url, "attach", "upload")
    messages, _ = call(window.url, attach, [[file_data(uploaded.json()[0])], None, 48, None])
    assert "note.txt" in json.dumps(result(messages)["data"])


def upload(window, name: str, data: bytes | Path, timeout: float = 120) -> httpx.Response:
    """POST one file to the window's upload route as its page does."""
    content = data.read_bytes() if isinstance(data, Path) else data
    return httpx.post(window.url + "/gradio_api/upload", files={"files": (name, content, "text/plain")},
                      headers={"Origin": window.url}, timeout=timeout)


def received_files() -> list[Path]:
    """The finished uploads waiting in the received folder (each in a folder Gradio names by its checksum)."""
    from localchat.ui.documents.uploads import received_dir

    return [p for p in received_dir().glob("*/**/*") if p.is_file()]


def test_what_the_browser_sent_is_deleted_once_attached_or_refused(window, tmp_path: Path):
    from localchat.ui.documents.uploads import received_dir

    broken = tmp_path / "report.pdf"
    broken.write_text("this is not a PDF")
    sent = []
    for path in (broken, secret_file(tmp_path)):
        answer = upload(window, path.name, path)
        assert answer.status_code == 200, answer.text[:200]
        sent.append(Path(answer.json()[0]))
    assert all(p.is_file() and p.resolve().is_relative_to(received_dir().resolve()) for p in sent)
    attach = handler(window.url, "attach", "upload")
    messages, _ = call(window.url, attach, [[file_data(str(p)) for p in sent], None, 48, None])
    attached = json.dumps(result(messages)["data"])
    assert "secret.txt" in attached and "report.pdf" not in attached
    assert not any(p.exists() for p in sent)  # the refused one too: it was never copied anywhere


def test_a_document_over_its_limit_is_refused_by_the_upload_itself(window, tmp_path: Path):
    from localchat.ui.documents.uploads import MAX_UPLOAD_BYTES

    big = bytes(MAX_UPLOAD_BYTES + 1)
    answer = upload(window, "big.txt", big)
    assert answer.status_code == 413 and "over the 50 MB limit" in answer.text, (answer.status_code, answer.text[:200])
    assert not [p for p in received_files() if p.name == "big.txt"]  # refused, and not kept
    # The same size as a model to import is taken (the import checks it, then moves or deletes it).
    model = upload(window, "big.gguf", big)
    assert model.status_code == 200, model.text[:200]
    Path(model.json()[0]).unlink()


def test_uploads_no_event_claims_do_not_pile_up(window):
    from localchat.ui.documents.received import ABANDONED_S, PARTIAL_IDLE_S, WAITING_BYTES, WAITING_FILES
    from localchat.ui.documents.uploads import received_dir

    folder = received_dir()
    long_ago = time.time() - ABANDONED_S - 60
    forgotten = folder / ("0" * 64) / "forgotten.txt"  # a finished upload no event ever claimed
    forgotten.parent.mkdir(exist_ok=True)
    forgotten.write_text("left behind")
    os.utime(forgotten, (long_ago, long_ago))
    broken = folder / "tmp-broken-connection"  # the partial file of an upload whose connection dropped
    broken.write_text("half a file")
    idle = time.time() - PARTIAL_IDLE_S - 5  # untouched for longer than a file being written ever is
    os.utime(broken, (idle, idle))
    writing = folder / "tmp-being-written"  # touched just now: an upload still arriving
    writing.write_text("arriving")
    try:
        # Posts that no attach or import follows: more documents than may wait.
        sent = []
        for i in range(WAITING_FILES + 4):
            answer = upload(window, f"note-{i}.txt", i.to_bytes(4, "big") + bytes(2**20))
            assert answer.status_code == 200, answer.text[:200]
            sent.append(Path(answer.json()[0]))
        left = received_files()
        assert len(left) <= WAITING_FILES, len(left)
        assert sent[-1].is_file() and not sent[0].exists()  # the oldest went first
        assert not forgotten.exists() and not broken.exists() and writing.exists()
        # Bytes are bounded too: documents at nearly their limit, more of them than the bytes that may wait.
        many = WAITING_BYTES // (48 * 10**6) + 1
        for i in range(many):
            answer = upload(window, f"long-{i}.txt", i.to_bytes(4, "big") + bytes(48 * 10**6))
            assert answer.status_code == 200, answer.text[:200]
        left = received_files()
        assert sum(p.stat().st_size for p in left) <= WAITING_BYTES
        assert any(p.name == f"long-{many - 1}.txt" for p in left) and not any(p.name == "long-0.txt" for p in left)
    finally:
        writing.unlink()


def test_an_upload_that_could_not_be_kept_is_refused_before_its_body(window):
    import shutil
    from urllib.parse import urlsplit

    from localchat.paths import DISK_MARGIN
    from localchat.ui.documents.received import MAX_IMPORT_BYTES
    from localchat.ui.documents.uploads import received_dir

    def head_only(length: str | None) -> str:
        """The answer to an upload's headers alone: the body never comes."""
        parts = urlsplit(window.url)
        with socket.create_connection((parts.hostname, parts.port), timeout=30) as conn:
            conn.sendall((f"POST /gradio_api/upload HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                          "Content-Type: multipart/form-data; boundary=x\r\n"
                          + (f"Content-Length: {length}\r\n" if length else "Transfer-Encoding: chunked\r\n")
                          + "\r\n").encode())
            reply = b""
            while b"\r\n\r\n" not in reply or len(reply.partition(b"\r\n\r\n")[2]) < length_of(reply):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                reply += chunk
            return reply.decode("latin-1")

    def length_of(reply: bytes) -> int:
        head = reply.partition(b"\r\n\r\n")[0].decode("latin-1").lower()
        return next((int(line.split(":", 1)[1]) for line in head.splitlines() if line.startswith("content-length:")), 0)

    over_import = head_only(str(MAX_IMPORT_BYTES + 1))
    assert over_import.startswith("HTTP/1.1 413") and "limit of a model import" in over_import, over_import[:300]
    assert "274.9 GB limit" in over_import and "GiB" not in over_import  # the units every size is written in
    # A GiB over what the disk has room for (other programs may free some meanwhile).
    over = shutil.disk_usage(received_dir()).free - DISK_MARGIN + 2**30
    if over <= MAX_IMPORT_BYTES:  # a disk with less free than the import limit: the room is the limit
        over_room = head_only(str(over))
        assert over_room.startswith("HTTP/1.1 413") and "room for" in over_room, over_room[:300]
    assert head_only(None).startswith("HTTP/1.1 411")


def test_the_file_route_serves_no_other_file(window, tmp_path: Path):
    secret = secret_file(tmp_path)
    for path in (f"/gradio_api/file={secret}", f"/file={secret}"):
        r = httpx.get(window.url + path, timeout=30)
        assert "55-XK-0391" not in r.text, path


def test_the_model_switcher_loads_only_listed_models_and_echoes_no_file(window, tmp_path: Path):
    secret = secret_file(tmp_path)
    switch = handler(window.url, "model", "input")
    before = window.runtime.model
    messages, _ = call(window.url, switch, [str(secret)])
    everything = json.dumps(messages)
    assert "XK55" not in everything and "55-XK" not in everything  # not a byte of the file comes back
    assert any(m.get("msg") == "process_completed" and not m.get("success", True) for m in messages), messages
    assert "not in the list" in everything
    assert window.runtime.model == before


def test_a_link_in_the_upload_folder_that_points_out_is_refused(window, tmp_path: Path):
    from localchat.ui.documents.uploads import received_dir

    secret = secret_file(tmp_path)
    link = received_dir() / "planted-link.txt"
    link.unlink(missing_ok=True)
    link.symlink_to(secret)
    try:
        attach = handler(window.url, "attach", "upload")
        messages, _ = call(window.url, attach, [[file_data(str(link))], None, 48, None])
        assert "55-XK-0391" not in json.dumps(messages) and "tokens" not in json.dumps(messages)
        done = [m for m in messages if m.get("msg") == "process_completed"]
        assert done and not done[-1].get("success", True), messages
    finally:
        link.unlink()


def test_the_page_scripts_action_channel_names_no_file(window, tmp_path: Path):
    secret = secret_file(tmp_path)
    act = handler(window.url, "action-go", "click")
    # Only numbers reach it (a chip's index, a turn and a step); anything else changes nothing.
    for request in (f"remove:{secret}", f"attach:{secret}", f"branch:{secret}:1", "branch:0:x", "remove:0"):
        messages, _ = call(window.url, act, [request, None, None, 48])
        assert "55-XK-0391" not in json.dumps(messages) and "tokens" not in json.dumps(messages)
    assert "55-XK-0391" not in conversation_texts(window)
