"""Every file localchat reads back from its data and config dirs survives any bytes: the bad-file
marks, the window's instance record, the presets, the tuned profile and the conversations' rows."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from localchat.errors import ConfigError

HOSTILE = [b"[" * 50_000 + b"]" * 50_000, b"[1]", b'"x"', b"null", b'{"presets": [1], "default": 5}',
           b'{"url": [], "pid": {}}', os.urandom(512), b""]


@pytest.fixture()
def home(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("raw", HOSTILE, ids=range(len(HOSTILE)))
def test_marks_record_presets_and_profile_survive_any_bytes(home: Path, raw: bytes):
    from localchat.models import bad_files
    from localchat.tune.profile import load_profile, profile_path
    from localchat.ui.chat.presets import Presets
    from localchat.ui.instance import instance_file, running_instance

    model = home / "m.gguf"
    model.write_bytes(b"GGUF")
    bad_files._record().write_bytes(raw)
    assert bad_files.reason_for(model) is None
    instance_file().write_bytes(raw)
    assert running_instance() is None
    presets = Presets(home / "presets.json")
    presets.path.write_bytes(raw)
    assert presets._read() == ({}, None)
    profile_path().write_bytes(raw)
    try:
        load_profile()
    except ConfigError as exc:  # a clear error that says what to do, never a crash
        assert "delete it or run `localchat tune`" in str(exc)


def test_a_conversation_whose_stored_rows_are_not_json_still_opens(tmp_path: Path):
    from localchat.ui.chat.store import Store

    store = Store(tmp_path / "conversations.sqlite3")
    conv_id = store.create("a chat", "", {})
    store.append(conv_id, "user", "Hello?", {})
    db = sqlite3.connect(tmp_path / "conversations.sqlite3")
    db.execute("UPDATE messages SET stats = '[[[' WHERE conversation_id = ?", (conv_id,))
    db.execute("UPDATE conversations SET settings = '5' WHERE id = ?", (conv_id,))
    db.commit()
    db.close()
    conv = store.get(conv_id)
    assert conv.messages[0].content == "Hello?" and conv.messages[0].stats == {} and conv.settings == {}


def test_a_corrupted_conversations_file_is_moved_aside_and_the_window_opens(tmp_path: Path, caplog):
    import logging

    from localchat.ui.chat.store import Store

    path = tmp_path / "conversations.sqlite3"
    path.write_bytes(b"SQLite format 3\0" + os.urandom(8192))
    caplog.set_level(logging.WARNING, logger="localchat.ui.chat.store")
    store = Store(path)
    conv_id = store.create("new", "", {})
    assert store.get(conv_id).title == "new"
    (aside,) = tmp_path.glob("conversations.sqlite3.corrupt-*")
    assert aside.stat().st_size > 8000  # kept for a person, not deleted
    assert sum("moved aside" in r.getMessage() for r in caplog.records) == 1
