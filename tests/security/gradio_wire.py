"""The window's own client protocol, spoken by hand: what a crafted client can send that the page never would."""

from __future__ import annotations

import json
import secrets
from typing import Any

import httpx


def handler(url: str, elem_id: str, trigger: str) -> int:
    """The fn_index of the event handler `trigger` ("upload", "input", "click") on the component `elem_id`."""
    config = httpx.get(url + "/config", timeout=30).json()
    ids = [c["id"] for c in config["components"] if c.get("props", {}).get("elem_id") == elem_id]
    assert ids, f"no component {elem_id!r} in the window"
    for index, dependency in enumerate(config["dependencies"]):
        if [ids[0], trigger] in [list(t) for t in dependency["targets"]]:
            return dependency.get("id", index)
    raise AssertionError(f"no {trigger} handler on {elem_id!r}")


def call(url: str, fn_index: int, data: list[Any], session: str | None = None) -> tuple[list[dict], str]:
    """Run one event through the queue; returns its messages (progress, warnings, result) and the session."""
    session = session or secrets.token_hex(8)
    joined = httpx.post(url + "/gradio_api/queue/join", timeout=30, json={
        "data": data, "fn_index": fn_index, "session_hash": session, "event_data": None, "trigger_id": None})
    assert joined.status_code == 200, joined.text[:300]
    messages: list[dict] = []
    with httpx.stream("GET", url + "/gradio_api/queue/data", params={"session_hash": session},
                      timeout=120) as stream:
        for line in stream.iter_lines():
            if not line.startswith("data:"):
                continue
            message = json.loads(line[5:])
            messages.append(message)
            if message.get("msg") in ("process_completed", "close_stream", "unexpected_error"):
                break
    return messages, session


def file_data(path: str) -> dict[str, Any]:
    """A file reference as the page sends it after an upload; here it names a path the client chose."""
    return {"path": path, "orig_name": path.rsplit("/", 1)[-1], "meta": {"_type": "gradio.FileData"}}


def result(messages: list[dict]) -> dict[str, Any]:
    done = [m for m in messages if m.get("msg") == "process_completed"]
    assert done, f"the event did not complete: {messages[-3:]}"
    return done[-1]["output"]
