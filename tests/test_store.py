"""The conversation store: persistence, ordering, and no half-written rows after a kill."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from localchat.ui.chat.store import Store


def test_conversations_persist_across_restarts(tmp_path: Path):
    db = tmp_path / "c.sqlite3"
    store = Store(db)
    first = store.create("Trip", system_prompt="Be brief.")
    store.append(first, "user", "Where is Lyon?")
    store.append(first, "assistant", "In France.", {"tokens_per_s": 90.5})
    second = store.create("Recipes")
    store.append(second, "user", "Soup?")
    store.close()

    again = Store(db)
    assert [c.id for c in again.list()] == [second, first]  # most recently changed first
    conv = again.get(first)
    assert [(m.role, m.content) for m in conv.messages] == [("user", "Where is Lyon?"), ("assistant", "In France.")]
    assert conv.messages[1].stats == {"tokens_per_s": 90.5}
    assert conv.chat_messages()[0] == {"role": "system", "content": "Be brief."}


def test_truncate_update_delete(tmp_path: Path):
    store = Store(tmp_path / "c.sqlite3")
    conv = store.create()
    for i in range(4):
        store.append(conv, "user" if i % 2 == 0 else "assistant", f"m{i}")
    store.truncate(conv, 3)  # regenerate the last answer
    store.append(conv, "assistant", "m3'")
    store.update(conv, title="Renamed", settings={"temperature": 0.2})
    got = store.get(conv)
    assert [m.content for m in got.messages] == ["m0", "m1", "m2", "m3'"]
    assert (got.title, got.settings) == ("Renamed", {"temperature": 0.2})
    store.delete(conv)
    assert store.get(conv) is None and store.list() == []


WRITER = """
import sys
from localchat.ui.chat.store import Store
store = Store(__import__("pathlib").Path(sys.argv[1]))
conv = store.create("busy")
print(conv, flush=True)
i = 0
while True:
    store.append(conv, "user", "x" * 5000 + str(i))
    i += 1
"""


def test_a_killed_writer_leaves_only_whole_messages(tmp_path: Path):
    db = tmp_path / "c.sqlite3"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    conv = proc.stdout.readline().strip()
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    messages = Store(db).get(conv).messages
    assert len(messages) > 10
    assert all(len(m.content) > 5000 and m.content.startswith("x" * 5000) for m in messages)
    positions = [r[0] for r in sqlite3.connect(db).execute(
        "SELECT position FROM messages WHERE conversation_id = ? ORDER BY position", (conv,))]
    assert positions == list(range(len(positions)))


def test_search_finds_titles_and_messages_and_replace_rewrites_one_message(tmp_path: Path):
    store = Store(tmp_path / "c.sqlite3")
    trip = store.create("Trip to Lyon")
    store.append(trip, "user", "Which trains run at 100% capacity?")
    soup = store.create("Recipes")
    store.append(soup, "user", "Soup with leeks?")
    assert [c.id for c in store.search("lyon")] == [trip]  # title, any case
    assert [c.id for c in store.search("LEEKS")] == [soup]  # message text
    assert [c.id for c in store.search("100%")] == [trip] and store.search("1_0") == []  # no wildcards
    store.replace(soup, 0, "Soup with onions?", {"edited": True})
    assert store.get(soup).messages[0].content == "Soup with onions?" and store.get(soup).messages[0].stats == {
        "edited": True}


def test_an_edited_turn_keeps_each_branch_and_a_switch_brings_one_back_whole(tmp_path: Path):
    from localchat.ui.chat.store import Message
    from localchat.ui.chat.versions import branch_marker, fork, show_branch

    store = Store(tmp_path / "c.sqlite3")
    conv = store.create()
    for role, text in (("user", "Portugal?"), ("assistant", "Lisbon."), ("user", "Austria?"), ("assistant", "Vienna.")):
        store.append(conv, role, text, {"n": text})

    def contents() -> list[str]:
        return [m.content for m in store.get(conv).messages]

    branches, cut = fork(store, conv, 0)  # the first question edited
    assert contents() == [] and [m.content for m in cut] == ["Portugal?", "Lisbon.", "Austria?", "Vienna."]
    store.append(conv, "user", "Greece?", branches)
    store.append(conv, "assistant", "Athens.")
    marker = branch_marker(0, store.get(conv).messages[0].stats)
    assert " 2/2 " in marker and 'title="next branch" disabled' in marker  # the last branch: nowhere next
    assert 'value="branch:0:-1" title="previous branch">' in marker
    assert show_branch(store, conv, 0, -1)
    assert contents() == ["Portugal?", "Lisbon.", "Austria?", "Vienna."]
    first = store.get(conv).messages[0]
    assert first.stats["n"] == "Portugal?" and first.stats["branch"] == 0 and first.stats["branches"][0] is None
    assert not show_branch(store, conv, 0, -1)  # there is no branch before the first
    # A second edit of the same turn adds a third branch; each keeps its own later turns.
    branches, _ = fork(store, conv, 0)
    store.append(conv, "user", "Spain?", branches)
    assert " 3/3 " in branch_marker(0, store.get(conv).messages[0].stats)
    assert show_branch(store, conv, 0, -1) and contents() == ["Greece?", "Athens."]
    assert show_branch(store, conv, 0, +1) and contents() == ["Spain?"]
    # A refused edit puts back what the fork cut.
    branches, cut = fork(store, conv, 0)
    store.splice(conv, 0, cut)
    assert contents() == ["Spain?"] and store.get(conv).messages[0].stats["branch"] == 2
    store.splice(conv, 1, [Message("assistant", "Madrid.", {})])
    assert contents() == ["Spain?", "Madrid."]


def test_a_deleted_turn_takes_its_answer_and_the_turns_left_out_after_it_keep_their_places(tmp_path: Path):
    from localchat.runtime.overflow import without
    from localchat.ui.chat.removal import remove_turn, remove_version

    store = Store(tmp_path / "c.sqlite3")
    conv = store.create("Harbour")
    for role, text, stats in (("user", "One?", {}), ("assistant", "1.", {}), ("user", "Two?", {}),
                              ("assistant", "2.", {}), ("user", "Three?", {}), ("assistant", "3.", {}),
                              ("user", "Four?", {"left_out": [0, 2]}), ("assistant", "4.", {"left_out": 2})):
        store.append(conv, role, text, stats)
    assert not remove_turn(store, conv, 1)  # an answer is not a turn
    assert not remove_turn(store, conv, 99)
    assert remove_turn(store, conv, 2)  # "Two?" with its answer; "Three?" moves up to turn 1
    messages = store.get(conv).messages
    assert [m.content for m in messages] == ["One?", "1.", "Three?", "3.", "Four?", "4."]
    assert messages[4].stats["left_out"] == [0, 1]  # still "One?" and "Three?"
    kept = without([{"role": m.role, "content": m.content} for m in messages], messages[4].stats["left_out"])
    assert [m["content"] for m in kept] == ["Four?", "4."]
    assert remove_turn(store, conv, 0)  # the first turn: the chat is named by the one that is first now
    assert store.get(conv).title == "Three?" and store.get(conv).messages[2].stats["left_out"] == [0]

    versions = [{"content": "Fore.", "stats": {"n": 1}}, {"content": "Four.", "stats": {"n": 2}},
                {"content": "IV.", "stats": {"n": 3}}]
    store.replace(conv, 3, "Four.", {"n": 2, "versions": versions, "version": 1})
    assert not remove_version(store, conv, 1)  # only the last answer's versions are deleted one by one
    assert remove_version(store, conv, 3)  # the one shown goes; the one before it shows
    last = store.get(conv).messages[-1]
    assert last.content == "Fore." and last.stats["version"] == 0 and len(last.stats["versions"]) == 2
    assert remove_version(store, conv, 3)
    last = store.get(conv).messages[-1]
    assert last.content == "IV." and last.stats == {"n": 3}  # one left: a plain answer again
    assert not remove_version(store, conv, 3)


def test_an_earlier_answers_version_switches_with_the_chat_that_followed_it(tmp_path: Path):
    from localchat.ui.chat.versions import show_version

    store = Store(tmp_path / "c.sqlite3")
    conv = store.create("Harbour")
    versions = [{"content": "Pier 4.", "stats": {"n": 1}}, {"content": "Pier 5.", "stats": {"n": 2}}]
    for role, text, stats in (("user", "Which pier?", {}), ("assistant", "Pier 5.", {"n": 2, "versions": versions,
                                                                                      "version": 1}),
                              ("user", "Which quay?", {"left_out": [0]}), ("assistant", "Quay 2.", {"n": 3})):
        store.append(conv, role, text, stats)
    store.replace(conv, 1, "Pier 5, by the crane.", store.get(conv).messages[1].stats)  # grown by a Continue
    shown = lambda: [m.content for m in store.get(conv).messages]  # noqa: E731
    assert not show_version(store, conv, 1, 1)  # the last version: nowhere further
    assert not show_version(store, conv, 0, -1)  # a question has no versions
    assert show_version(store, conv, 1, -1)
    assert shown() == ["Which pier?", "Pier 4."]  # the chat goes on from the version shown
    reply = store.get(conv).messages[1]
    assert reply.stats["version"] == 0 and reply.stats["n"] == 1
    assert reply.stats["versions"][1]["after"][0] == {"role": "user", "content": "Which quay?",
                                                      "stats": {"left_out": [0]}}
    store.append(conv, "user", "And the other pier?", {})
    store.append(conv, "assistant", "Pier 6.", {})
    assert show_version(store, conv, 1, 1)
    assert shown() == ["Which pier?", "Pier 5, by the crane.", "Which quay?", "Quay 2."]
    messages = store.get(conv).messages
    assert messages[2].stats == {"left_out": [0]} and messages[3].stats == {"n": 3}
    assert "after" not in messages[1].stats["versions"][1]  # shown: the messages themselves are what followed
    assert show_version(store, conv, 1, -1)
    assert shown() == ["Which pier?", "Pier 4.", "And the other pier?", "Pier 6."]
