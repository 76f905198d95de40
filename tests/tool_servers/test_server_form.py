"""The Tools panel's logic without a browser: the list never shows a secret's value, the form is checked as
mcp.json is and keeps a secret it does not repeat, other apps' servers are offered and brought in only when
asked, and the commands allowed to start are kept owner-only."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from localchat.errors import ConfigError
from localchat.mcp_host.servers import ServerSpec, configured, save, servers_file
from localchat.ui.chat import server_form
from localchat.ui.chat.chat_tools import ChatTools, StartedCommands, selection
from localchat.ui.chat.store import Store


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HOME", str(tmp_path))  # other apps' files are looked for here
    return tmp_path


def test_the_list_names_secrets_but_never_shows_their_values():
    spec = ServerSpec("files", command="npx", args=("-y", "<b>srv</b>"), env={"TOKEN": "sekrit"},
                      always_allow=("read",))
    web = ServerSpec("wiki", url="https://example.com/mcp", headers={"Authorization": "Bearer sekrit2"}, disabled=True)
    shown = server_form.listing_html([spec, web])
    assert "sekrit" not in shown and "TOKEN" in shown and "Authorization" in shown
    assert "&lt;b&gt;srv&lt;/b&gt;" in shown and "<b>srv</b>" not in shown  # escaped, never markup
    assert "stdio" in shown and "http · off" in shown and "always allowed: read" in shown
    assert "sekrit" not in "".join(map(str, server_form.form_of(spec)))


def test_the_form_adds_edits_keeps_unrepeated_secrets_and_removes():
    spec = server_form.spec_from_form("files", "npx", "-y\nserver\n", "", "TOKEN=sekrit\nOTHER=1", "", False,
                                      "read, list", None)
    server_form.saved(spec, server_form.NEW)
    assert configured() == [spec] and spec.args == ("-y", "server") and spec.always_allow == ("read", "list")
    name, command, args, url, env, headers, off, always = server_form.form_of(spec)
    assert env == "TOKEN\nOTHER"  # the names only; a name alone keeps its value
    edited = server_form.spec_from_form(name, command, args, url, "TOKEN", headers, True, always, spec)
    server_form.saved(edited, "files")
    [kept] = configured()
    assert kept.env == {"TOKEN": "sekrit"} and kept.disabled  # OTHER left out of the form: removed
    assert stat.S_IMODE(servers_file().stat().st_mode) == 0o600
    with pytest.raises(ConfigError, match="already a server named 'files'"):
        server_form.saved(server_form.spec_from_form("files", "x", "", "", "", "", False, "", None), server_form.NEW)
    assert server_form.removed("files") == [] and configured() == []


@pytest.mark.parametrize("fields, words", [
    (("bad name!", "npx", "", "", "", "", False, ""), "letters, digits"),
    (("x", "", "", "", "", "", False, ""), "exactly one of command"),
    (("x", "npx", "", "https://a", "", "", False, ""), "exactly one of command"),
    (("x", "", "", "ftp://a", "", "", False, ""), "must start with http"),
    (("x", "npx", "", "", "NEWNAME", "", False, ""), "has no value"),
])
def test_a_bad_form_says_what_to_fix(fields, words):
    with pytest.raises(ConfigError, match=words):
        server_form.spec_from_form(*fields, old=None)


def test_other_apps_servers_are_offered_and_brought_in_only_when_asked(home: Path):
    cursor = home / ".cursor" / "mcp.json"
    cursor.parent.mkdir()
    cursor.write_text(json.dumps({"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]},
                                                 "mine": {"url": "http://127.0.0.1:1/mcp"}}}))
    save([ServerSpec("mine", command="x")])
    found = server_form.offers()
    assert [(app, [s.name for s in specs]) for app, _, specs in found] == [("Cursor", ["time"])]
    assert "Cursor" in server_form.offer_text(found) and str(cursor) in server_form.offer_text(found)
    assert [s.name for s in configured()] == ["mine"]  # offered, not brought in
    server_form.brought_in(found)
    assert [s.name for s in configured()] == ["mine", "time"] and server_form.offers() == []
    (home / ".cursor" / "mcp.json").write_text("{not json")
    assert server_form.offers() == []  # another app's broken file is passed over


def test_allowed_commands_are_kept_owner_only_and_per_command(home: Path):
    started = StartedCommands()
    spec = ServerSpec("a", command="python", args=("server.py",))
    assert not started.allowed(spec) and started.allowed(ServerSpec("web", url="http://127.0.0.1:1/mcp"))
    started.allow(spec)
    assert started.allowed(spec) and not started.allowed(ServerSpec("a", command="python", args=("other.py",)))
    path = home / "home" / "config" / "mcp-started.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.write_text("[not a list")
    assert not StartedCommands().allowed(spec)  # a broken file allows nothing


def test_a_pages_choice_goes_with_its_first_message_and_the_pick_is_for_one_turn(home: Path):
    store = Store(home / "chats.sqlite3")
    tools = ChatTools(store)
    tools.choose("page", None, servers=["fixture"], pick="fixture/echo")
    cid = store.create("x")
    tools.bind("page", cid)
    assert selection(store.get(cid).settings) == (["fixture"], set())
    assert tools.picks[cid] == "fixture/echo"
    tools.picks.clear()
    tools.bind("page", cid)
    assert cid not in tools.picks  # the pick went with one message
    tools.choose("page", cid, servers=[])
    assert selection(store.get(cid).settings) == ([], set()) and not tools.on(store.get(cid).settings)
    assert selection({"tools": {"servers": "no", "off": 3}}) == ([], set())
    assert not tools.answer(cid, "nothing-waits", "once")
    store.close()
