"""The Responses store's SQLite file is read back, so it is untrusted input: a corrupted file is moved
aside, a new one started, and that said once; the routes go on answering."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import httpx

from localchat.api.response_store import ResponseStore
from localchat.paths import data_dir

RESPONSE = {"id": "resp_" + "a" * 24, "object": "response", "output": []}


def test_a_corrupted_file_at_start_is_moved_aside_and_a_new_one_started(tmp_path: Path, caplog):
    """The issue's ninth finding: a corrupted responses.sqlite3 made every Responses route a bare 500
    for good."""
    path = tmp_path / "responses.sqlite3"
    path.write_bytes(b"SQLite format 3\0" + os.urandom(8192))
    caplog.set_level(logging.WARNING, logger="localchat.api.response_store")
    store = ResponseStore(path)
    store.put(RESPONSE, [{"role": "user", "content": "hi"}])
    assert store.get(RESPONSE["id"])[0] == RESPONSE
    assert [p.name for p in tmp_path.glob("responses.sqlite3.corrupt-*")]
    assert sum("moved aside" in r.getMessage() for r in caplog.records) == 1


def test_a_row_that_does_not_parse_is_dropped(tmp_path: Path):
    store = ResponseStore(tmp_path / "responses.sqlite3")
    store.put(RESPONSE, [])
    store._db.execute("UPDATE responses SET response = '[[[' WHERE id = ?", (RESPONSE["id"],))
    assert store.get(RESPONSE["id"]) is None and len(store) == 0


def test_the_routes_answer_with_a_corrupted_file(supervised_api: str, tmp_path: Path, monkeypatch):
    api = supervised_api
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    (data_dir() / "responses.sqlite3").write_bytes(os.urandom(4096))
    assert httpx.get(f"{api}/v1/responses/resp_{'0' * 24}", timeout=60).status_code == 404
