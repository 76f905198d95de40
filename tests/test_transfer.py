"""Chats out and in: Markdown and JSON exports, and a JSON import that trusts nothing in the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localchat.errors import RequestError
from localchat.ui.chat.store import Store
from localchat.ui.chat.transfer import import_json, to_json, to_markdown


def a_chat_with_a_branch(store: Store) -> str:
    conv = store.create("Lighthouse notes", "Answer briefly.", {"temperature": 0.3, "seed": None})
    old_branch = [{"role": "user", "content": "Which cat?", "stats": {}},
                  {"role": "assistant", "content": "Pepper.", "stats": {"completion_tokens": 3}}]
    store.append(conv, "user", "What is the cat called?",
                 {"prompt": "Excerpts…\n\nQuestion: What is the cat called?", "documents": ["/secret/upload/log.txt"],
                  "branches": [old_branch, None], "branch": 1, "included": "log.txt: lines 40–44"})
    store.append(conv, "assistant", "Pepperpot.", {"included": "log.txt: lines 40–44", "completion_tokens": 4,
                                                   "versions": [{"content": "Pepperpot.", "stats": {}},
                                                                {"content": "Pepper.", "stats": {}, "after": [
                                                                    {"role": "user", "content": "And the dog?"},
                                                                    {"role": "assistant", "content": "Marmalade."}]}],
                                                   "version": 0})
    return conv


def test_a_chat_goes_out_and_comes_back_with_its_branches_and_settings(tmp_path: Path):
    store = Store(tmp_path / "a.sqlite3")
    conv = store.get(a_chat_with_a_branch(store))
    markdown = to_markdown(conv)
    assert markdown.startswith("# Lighthouse notes") and "## You\n\nWhat is the cat called?" in markdown
    assert "## localchat\n\nPepperpot." in markdown and "*Included: log.txt: lines 40–44*" in markdown
    other = Store(tmp_path / "b.sqlite3")
    (new_id,) = import_json(other, to_json([conv]).encode())
    back = other.get(new_id)
    assert (back.title, back.system_prompt, back.settings) == (conv.title, conv.system_prompt, conv.settings)
    assert [(m.role, m.content) for m in back.messages] == [(m.role, m.content) for m in conv.messages]
    first = back.messages[0].stats
    assert first["branches"][0][1]["content"] == "Pepper." and first["branch"] == 1  # the old branch came along
    assert back.messages[1].stats["versions"][0]["content"] == "Pepperpot."
    assert back.messages[1].stats["versions"][1]["after"][1]["content"] == "Marmalade."  # what followed a version
    assert "documents" not in first  # a path of the exporting machine is never taken


def test_a_thinking_models_thinking_goes_out_closed_before_its_answer_and_comes_back(tmp_path: Path):
    store = Store(tmp_path / "t.sqlite3")
    conv_id = store.create("Sums", "", {})
    store.append(conv_id, "user", "What is 2 + 2?", {})
    store.append(conv_id, "assistant", "4.", {"thinking": "Two and two <b>make</b> four.\nSo: 4.", "thought_s": 3.4})
    store.append(conv_id, "user", "And 3 + 3?", {})
    store.append(conv_id, "assistant", "6.", {"completion_tokens": 2})
    conv = store.get(conv_id)
    markdown = to_markdown(conv)
    # Closed, as the window shows it, before the answer; the model's text escaped, never markup.
    assert "## localchat\n\n<details><summary>Thought for 3 s</summary>\n\n<pre>Two and two &lt;b&gt;make&lt;/b&gt; four." \
           "\nSo: 4.</pre>\n\n</details>\n\n4.\n" in markdown
    assert markdown.count("<details>") == 1  # a reply without thinking has no block
    (new_id,) = import_json(Store(tmp_path / "u.sqlite3"), to_json([conv]).encode())
    back = Store(tmp_path / "u.sqlite3").get(new_id).messages[1].stats
    assert (back["thinking"], back["thought_s"]) == ("Two and two <b>make</b> four.\nSo: 4.", 3.4)


@pytest.mark.parametrize("data, says", [
    (b"not json", "not JSON"),
    (b'{"chats": []}', "not a localchat export"),
    (b'{"format": "localchat-chats", "version": 99, "chats": []}', "version 99"),
    (b'{"format": "localchat-chats", "version": 1, "chats": [{"messages": [{"role": "system", "content": "x"}]}]}',
     "message 1 needs a role"),
    (b'{"format": "localchat-chats", "version": 1, "chats": [{"title": 5, "messages": []}]}', "must be text"),
    (b"[" * 100_000 + b"]" * 100_000, "not a localchat export"),
])
def test_a_broken_or_foreign_file_is_refused_and_adds_nothing(tmp_path: Path, data: bytes, says: str):
    store = Store(tmp_path / "c.sqlite3")
    good = {"title": "Fine", "messages": [{"role": "user", "content": "hi"}]}
    if data.startswith(b'{"format"'):  # a good chat before the bad one: all are checked before any is added
        doc = json.loads(data)
        doc["chats"].insert(0, good)
        data = json.dumps(doc).encode()
    with pytest.raises(RequestError, match=says):
        import_json(store, data)
    assert store.list() == []


def test_an_imported_file_cannot_point_a_later_question_at_a_local_file(tmp_path: Path):
    store = Store(tmp_path / "d.sqlite3")
    hostile = {"format": "localchat-chats", "version": 1, "chats": [{"title": "x", "settings": {
        "temperature": "hot", "max_tokens": 64, "n_ctx": 10**9}, "messages": [
        {"role": "user", "content": "q", "stats": {"mode": "retrieved", "documents": ["/etc/passwd"],
                                                   "searched": ["/etc/shadow"],
                                                   "branches": [[{"role": "user", "content": "q", "stats": {
                                                       "documents": ["/etc/hosts"]}}]]}}]}]}
    (conv_id,) = import_json(store, json.dumps(hostile).encode())
    conv = store.get(conv_id)
    assert "/etc/" not in json.dumps(conv.messages[0].stats)
    assert conv.settings == {"max_tokens": 64}  # only the window's own settings, and only numbers


def test_a_reply_whose_imported_numbers_are_partial_is_shown_with_its_text(tmp_path: Path):
    from localchat.ui.chat.core import ChatCore

    store = Store(tmp_path / "e.sqlite3")
    doc = {"format": "localchat-chats", "version": 1, "chats": [{"title": "odd", "messages": [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": "the <b>answer</b>",
                                           "stats": {"completion_tokens": 5, "total_s": "long"}}]}]}
    (conv_id,) = import_json(store, json.dumps(doc).encode())
    shown = ChatCore.display(store.get(conv_id))  # display reads only the chat
    assert shown[-1]["content"] == "the &lt;b&gt;answer&lt;/b&gt;"
