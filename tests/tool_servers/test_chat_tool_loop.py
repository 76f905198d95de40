"""The window's tool loop on the real model and the project's fixture server over stdio: a picked tool's call
asked, approved, run and fed back; denied and told to the model; stopped mid-call; an untrusted command never
started; the cards kept with the answer and checked on import."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from localchat.mcp_host.hub import tool_servers
from localchat.mcp_host.servers import save
from localchat.runtime.engine import Engine
from localchat.ui.chat import tool_cards
from localchat.ui.chat.core import ChatCore
from localchat.ui.chat.imported import reply_stats
from localchat.ui.chat.session import Runtime, Sampling
from localchat.ui.chat.store import Store
from localchat.ui.chat.tool_loop import DENIED
from localchat.ui.chat.transfer import import_json, to_json, to_markdown

from mcp_fixtures import MODEL, stdio_spec

DEADLINE_S = 240


@pytest.fixture()
def core(engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ChatCore]:
    monkeypatch.setenv("LOCALCHAT_HOME", str(tmp_path))  # its own mcp.json and started commands
    store = Store(tmp_path / "chats.sqlite3")
    yield ChatCore(Runtime(engine, MODEL), store)
    store.close()


def chat(core: ChatCore, pick: str, spec: Any = None, allow_start: bool = True) -> str:
    spec = spec or stdio_spec()
    save([spec])
    if allow_start:
        core.tools.started.allow(spec)
    cid = core.store.create("tools", "", {"tools": {"servers": [spec.name], "off": []}})
    core.store.append(cid, "user", "Repeat the word 'hello' with the echo tool.")
    core.tools.choose("page", None, pick=pick)
    core.tools.bind("page", cid)
    return cid


class Answering:
    """core.answer on a thread, as the window's handler runs it; what it drew so far."""

    def __init__(self, core: ChatCore, cid: str) -> None:
        self.core, self.cid, self.drawn = core, cid, []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for shown in self.core.answer(self.cid, Sampling(temperature=0.0, max_tokens=48, seed=1)):
            self.drawn.append(shown)

    def card(self, state: str) -> dict[str, Any]:
        """The running answer's newest card once it is in `state`."""
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            run = self.core.active.get(self.cid)
            steps = getattr(getattr(run, "view", None), "steps", [])
            if steps and steps[-1]["cards"] and steps[-1]["cards"][-1]["state"] == state:
                return steps[-1]["cards"][-1]
            time.sleep(0.05)
        raise AssertionError(f"no card reached {state!r} within {DEADLINE_S} s; drawn: {self.drawn[-1:]}")

    def saved(self) -> dict[str, Any]:
        self.thread.join(DEADLINE_S)
        assert not self.thread.is_alive(), "the answer did not end"
        conv = self.core.store.get(self.cid)
        assert conv is not None and conv.messages[-1].role == "assistant"
        return conv.messages[-1].stats


def test_a_picked_tool_is_asked_run_and_fed_back_and_its_card_is_kept(core: ChatCore):
    cid = chat(core, "fixture/echo")
    answering = Answering(core, cid)
    card = answering.card("asking")
    assert card["server"] == "fixture" and card["tool"] == "echo"
    assert 'class="lc-approve' in answering.drawn[-1]  # the card asks on the page
    run = core.active[cid]
    assert core.tools.answer(cid, card["id"], "once")
    assert not core.tools.answer(cid, card["id"], "once"), "an answer to a call no longer waiting counts"
    stats = answering.saved()
    [step] = stats["tool_steps"]
    [kept] = step["cards"]
    assert kept["state"] == "done" and kept["approval"] == "once" and kept["result"].startswith("echo: ")
    assert kept["seconds"] > 0
    assert run.messages[-1] == {"role": "tool", "tool_call_id": kept["id"], "content": kept["result"]}
    assert kept["result"] in run.view.steps[0]["cards"][0]["result"]
    shown = core.display(core.store.get(cid))[-1]["content"]
    assert "lc-approve" not in shown and "fixture · echo — done" in shown
    conv = core.store.get(cid)
    assert "fixture · echo — done" in to_markdown(conv) and "echo: " in to_markdown(conv)
    [copy] = import_json(core.store, to_json([conv]).encode())  # an export keeps the cards, an import shows them
    assert core.store.get(copy).messages[-1].stats["tool_steps"] == stats["tool_steps"]


def test_a_denied_call_is_told_to_the_model_and_never_runs(core: ChatCore):
    cid = chat(core, "fixture/echo")
    answering = Answering(core, cid)
    card = answering.card("asking")
    run = core.active[cid]
    core.tools.answer(cid, card["id"], "deny")
    [step] = answering.saved()["tool_steps"]
    assert step["cards"][0]["state"] == "denied" and not step["cards"][0]["result"]
    assert run.messages[-1]["content"] == DENIED.format(tool="echo")


def test_always_for_this_tool_trusts_it_in_mcp_json_and_the_next_call_runs_unasked(core: ChatCore):
    cid = chat(core, "fixture/echo")
    answering = Answering(core, cid)
    core.tools.answer(cid, answering.card("asking")["id"], "always")
    answering.saved()
    from localchat.mcp_host.servers import configured

    assert configured()[0].always_allow == ("echo",)
    core.store.append(cid, "user", "Again, please.")
    core.tools.choose("page", None, pick="fixture/echo")
    core.tools.bind("page", cid)
    again = Answering(core, cid).saved()
    assert again["tool_steps"][0]["cards"][0]["approval"] == "trusted"
    assert again["tool_steps"][0]["cards"][0]["state"] == "done"


def test_stop_ends_a_running_call_and_the_answer(core: ChatCore):
    spec = stdio_spec("fixture", FIXTURE_SLOW_AT_LEAST="120")
    cid = chat(core, "fixture/slow", spec)
    answering = Answering(core, cid)
    core.tools.answer(cid, answering.card("asking")["id"], "once")
    answering.card("running")
    began = time.monotonic()
    core.stop(cid)
    stats = answering.saved()
    assert time.monotonic() - began < 30, "Stop waited for the call"
    assert stats["tool_steps"][0]["cards"][0]["state"] == "stopped"
    assert stats["finish_reason"] == "cancelled"
    # The server is not left busy with the stopped call: the next one answers at once.
    assert tool_servers().call(spec, "echo", {"text": "after"}, 30, 1000).text == "echo: after"


def test_a_command_not_allowed_to_start_is_left_out_not_started(core: ChatCore):
    cid = chat(core, "fixture/echo", allow_start=False)
    stats = Answering(core, cid).saved()
    assert "tool_steps" not in stats
    said = "fixture: its command was not allowed to start yet (Tools panel)"
    assert stats["tool_notes"] == [said]  # kept with the answer, and shown with it
    assert "Tools left out: fixture: its command was not allowed" in core.display(core.store.get(cid))[-1]["content"]


def test_imported_cards_are_checked_and_never_left_asking():
    stats = {"tool_steps": [{"thinking": "", "text": "x", "cards": [
        tool_cards.new_card("c1", "srv", "echo", "{}") | {"result": "<b>hi</b>", "seconds": "odd"}]}]}
    [step] = reply_stats(stats, lambda m: None)["tool_steps"]
    assert step["cards"][0]["state"] == "not run" and step["cards"][0]["seconds"] == 0.0
    assert "<b>" not in tool_cards.card_html(step["cards"][0]) and "&lt;b&gt;" in tool_cards.card_html(step["cards"][0])
    assert "lc-approve" not in tool_cards.card_html(step["cards"][0])
    assert reply_stats({"tool_notes": ["a <b>", 5]}, lambda m: None)["tool_notes"] == ["a <b>"]
    for bad in ([{"cards": "no"}], [{"text": 5, "cards": []}], [{"cards": [{"result": 7}]}], "steps", []):
        assert "tool_steps" not in reply_stats({"tool_steps": bad}, lambda m: None)
