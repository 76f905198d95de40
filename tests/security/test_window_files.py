"""No file leaves the machine through the window: attach and the model switcher take only what they offer."""

from __future__ import annotations

import json
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


def test_what_the_browser_sent_is_deleted_once_attached_or_refused(window, tmp_path: Path):
    from localchat.ui.uploads import MAX_UPLOAD_BYTES, received_dir

    big = tmp_path / "big.txt"
    with big.open("wb") as f:  # over the document limit, under the window's (imports may be large)
        f.truncate(MAX_UPLOAD_BYTES + 1)
    sent = []
    for path in (big, secret_file(tmp_path)):
        with path.open("rb") as f:
            answer = httpx.post(window.url + "/gradio_api/upload", files={"files": (path.name, f, "text/plain")},
                                headers={"Origin": window.url}, timeout=120)
        assert answer.status_code == 200, answer.text[:200]
        sent.append(Path(answer.json()[0]))
    assert all(p.is_file() and p.resolve().is_relative_to(received_dir().resolve()) for p in sent)
    attach = handler(window.url, "attach", "upload")
    messages, _ = call(window.url, attach, [[file_data(str(p)) for p in sent], None, 48, None])
    assert "secret.txt" in json.dumps(result(messages)["data"]) and "big.txt" not in json.dumps(result(messages)["data"])
    assert not any(p.exists() for p in sent)  # the refused one too: it was never copied anywhere


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
    from localchat.ui.uploads import received_dir

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
