"""A full disk is not a corrupt store: the Responses store and the conversation store set their file aside only
when SQLite says it is corrupt or no database, a write that does not fit says so (and the store's earlier rows
stay), a start on a full disk opens the store later, and two files set aside in one second keep both."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from conftest import fill

from localchat.api.response_store import ResponseStore
from localchat.errors import StoreError
from localchat.paths import set_aside
from localchat.sqlite_file import corrupt
from localchat.ui.chat.store import Store


def response(number: int, padding: int = 0) -> dict:
    return {"id": f"resp_{number:024d}", "object": "response", "output": [], "note": "x" * padding}


def test_a_full_disk_loses_no_stored_response(small_disk):
    disk = small_disk("2m")
    store = ResponseStore(disk / "responses.sqlite3")
    for number in range(20):
        store.put(response(number, 1000), [{"role": "user", "content": f"question {number}"}])
    filler = fill(disk)
    for attempt in range(2):  # a second failure in the same second once set aside again, over the first
        with pytest.raises(StoreError, match="the disk is full"):
            store.put(response(100 + attempt, 400_000), [])
    assert not list(disk.glob("*.corrupt-*"))
    assert all(store.get(response(n)["id"]) is not None for n in range(20))
    filler.unlink()
    store.put(response(200), [])
    assert len(store) == 21 and store.get(response(0)["id"])[1] == [{"role": "user", "content": "question 0"}]


def test_a_store_started_on_a_full_disk_opens_once_there_is_room(small_disk, caplog):
    disk = small_disk("2m")
    filler = fill(disk)
    store = ResponseStore(disk / "responses.sqlite3")  # no exception: the API starts
    with pytest.raises(StoreError, match="the disk is full"):
        store.put(response(1, 100_000), [])
    assert not list(disk.glob("*.corrupt-*"))
    filler.unlink()
    store.put(response(1), [])
    assert store.get(response(1)["id"]) is not None


def test_a_chat_that_does_not_fit_says_the_disk_is_full_and_the_chats_stay(small_disk):
    disk = small_disk("2m")
    store = Store(disk / "conversations.sqlite3")
    chat = store.create("kept")
    store.append(chat, "user", "hello")
    filler = fill(disk)
    with pytest.raises(StoreError) as full:
        store.append(chat, "assistant", "y" * 600_000)
    assert "the disk is full" in str(full.value) and "rollback" not in str(full.value)  # SQLite's own error
    assert [m.content for m in store.get(chat).messages] == ["hello"] and not list(disk.glob("*.corrupt-*"))
    filler.unlink()
    store.append(chat, "assistant", "hi")
    store.close()
    assert [m.content for m in Store(disk / "conversations.sqlite3").get(chat).messages] == ["hello", "hi"]


def test_the_conversations_opened_on_a_full_disk_open_later(small_disk):
    disk = small_disk("2m")
    filler = fill(disk)
    store = Store(disk / "conversations.sqlite3")
    with pytest.raises(StoreError, match="the disk is full"):
        store.create("a chat")
    filler.unlink()
    chat = store.create("a chat")
    assert store.get(chat).title == "a chat" and not list(disk.glob("*.corrupt-*"))


def test_only_sqlites_corrupt_and_not_a_database_set_a_store_aside(tmp_path: Path):
    bad = tmp_path / "bad.sqlite3"
    bad.write_bytes(os.urandom(4096))
    with pytest.raises(sqlite3.DatabaseError) as not_a_database:
        sqlite3.connect(bad).execute("SELECT * FROM sqlite_master").fetchall()
    assert corrupt(not_a_database.value)
    closed = sqlite3.connect(tmp_path / "fine.sqlite3")
    closed.close()
    with pytest.raises(sqlite3.ProgrammingError) as on_closed:
        closed.execute("SELECT 1")
    assert not corrupt(on_closed.value)
    assert not corrupt(sqlite3.OperationalError("database or disk is full"))


def test_two_files_set_aside_in_one_second_keep_both(tmp_path: Path):
    path = tmp_path / "responses.sqlite3"
    asides = []
    for held in (b"first", b"second", b"third"):
        path.write_bytes(held)
        Path(f"{path}-wal").write_bytes(held + b" wal")
        asides.append(set_aside(path))
    assert len(set(asides)) == 3
    assert [a.read_bytes() for a in asides] == [b"first", b"second", b"third"]
    assert [Path(f"{a}-wal").read_bytes() for a in asides] == [b"first wal", b"second wal", b"third wal"]
