"""MCP tools in the window, in a real browser, on the project's fixture server over stdio: a server added in the
Tools panel, its command shown and allowed before it first starts, `echo` picked for the turn (SmolLM2 follows
the forced call), the call approved and its card showing the result, then the answer; a call denied; Stop during
the `slow` tool; the cards after a reload. Screenshots at desktop and phone width."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Iterator

import pytest
from browser_kit import ARTIFACTS, LONG, WIDE, expect, needs_chromium, open_window
from ui_server import RunningUI, start_ui

from localchat.mcp_host.servers import configured

sys.path.insert(0, str(Path(__file__).parent / "tool_servers"))
from mcp_fixtures import FIXTURE  # noqa: E402

pytestmark = needs_chromium
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def ui(model_path: Path, tmp_path_factory) -> Iterator[RunningUI]:
    folder = tmp_path_factory.mktemp("tools-window")
    home = os.environ.get("LOCALCHAT_HOME")
    os.environ["LOCALCHAT_HOME"] = str(folder / "home")  # its own mcp.json and allowed commands
    try:
        yield from start_ui(model_path, folder / "conversations.sqlite3")
    finally:
        if home is not None:
            os.environ["LOCALCHAT_HOME"] = home


@pytest.fixture()
def page(ui: RunningUI, browser):
    context = browser.new_context(viewport=WIDE)
    page = context.new_page()
    page.set_default_timeout(60_000)
    open_window(page, ui)
    yield page
    context.close()


def shot(page, name: str) -> None:
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(ARTIFACTS / f"tools-{name}.png"))


def open_tools(page) -> None:
    page.get_by_text("Tools: MCP servers").click()
    expect(page.locator("#mcp-servers")).to_be_visible()


def add_server(page, name: str, env: str = "") -> None:
    expect(page.locator("#mcp-edit input")).to_have_value("add a new server")  # a page opens on a new one
    page.locator("#mcp-name textarea, #mcp-name input").fill(name)
    page.locator("#mcp-command textarea, #mcp-command input").fill(sys.executable)
    page.locator("#mcp-args textarea").fill(str(FIXTURE))
    if env:
        page.locator("#mcp-env textarea").fill(env)
    page.locator("#mcp-save").click()
    expect(page.locator("#mcp-servers")).to_contain_text(name)


def turn_on(page, name: str, tool: str) -> None:
    """The server on in this chat (its command allowed when asked), and `tool` picked for the turn."""
    page.locator("#mcp-on").get_by_label(name, exact=True).check()
    allow = page.locator("#mcp-allow")
    expect(page.locator("#tool-pick")).to_be_visible()
    if allow.is_visible():
        expect(page.locator("#mcp-consent")).to_contain_text(str(FIXTURE))  # the whole command, before it starts
        allow.click()
    page.locator("#tool-pick input").click()
    page.get_by_role("option", name=f"{name} · {tool}").click()


def ask(page, text: str):
    page.locator("#message textarea").fill(text)
    page.locator("#send").click()
    return page.locator("#chat .bot").last


def test_add_a_server_pick_echo_approve_and_see_the_card_and_the_answer(page, ui: RunningUI):
    open_tools(page)
    add_server(page, "fixture", env="FIXTURE_TOKEN=sekrit-value")
    # A secret's value is never shown again: the form keeps its name only, the list names it.
    expect(page.locator("#mcp-env textarea")).to_have_value("FIXTURE_TOKEN")
    assert "sekrit-value" not in page.locator("#tools-panel").inner_text()
    expect(page.locator("#mcp-servers")).to_contain_text("env: FIXTURE_TOKEN")
    assert configured()[0].env == {"FIXTURE_TOKEN": "sekrit-value"}
    page.locator("#mcp-on").get_by_label("fixture", exact=True).check()
    expect(page.locator("#mcp-consent")).to_contain_text(str(FIXTURE))
    expect(page.locator("#mcp-allow")).to_be_visible()
    page.locator("#tools-panel").screenshot(path=str(ARTIFACTS / "tools-panel-consent.png"))
    page.locator("#mcp-allow").click()
    page.locator("#tool-pick input").click()
    page.get_by_role("option", name="fixture · echo").click()
    reply = ask(page, "Repeat the word hello.")
    card = reply.locator("details.lc-call").last
    expect(card.locator("summary")).to_contain_text("fixture · echo — waiting for your approval", timeout=LONG)
    expect(reply.locator("button.lc-approve")).to_have_count(3)
    shot(page, "approval")
    # Reloaded while the call waits (on a phone now): the page follows the answer, and its card still asks.
    page.set_viewport_size(PHONE)
    page.reload()
    reply = page.locator("#chat .bot").last
    expect(reply.locator("button.lc-approve")).to_have_count(3, timeout=LONG)
    shot(page, "approval-390")
    reply.get_by_role("button", name="Allow once").click()
    card = reply.locator("details.lc-call").last
    expect(card.locator("summary")).to_contain_text(re.compile(r"fixture · echo — done, [\d.]+ s"), timeout=LONG)
    expect(page.locator("#chat .bot").last).to_contain_text("TTFT", timeout=LONG)  # the answer after the call
    page.set_viewport_size(WIDE)
    page.reload()
    card = page.locator("#chat .bot details.lc-call").last
    expect(card.locator("summary")).to_contain_text("fixture · echo — done")  # kept with the answer
    expect(card).not_to_have_attribute("open", "")  # collapsed when done
    card.locator("summary").click()
    expect(card.locator(".lc-call-text").last).to_contain_text("echo: ")
    shot(page, "card")
    conv = ui.store.list()[0]
    stats = ui.store.get(conv.id).messages[-1].stats
    assert stats["tool_steps"][0]["cards"][0]["result"].startswith("echo: ")
    page.set_viewport_size(PHONE)
    open_window(page, ui)
    expect(page.locator("#chat .bot details.lc-call summary").last).to_contain_text("done")
    shot(page, "card-390")
    page.get_by_text("Tools: MCP servers").click()
    page.locator("#tools-panel").scroll_into_view_if_needed()
    page.locator("#tools-panel").screenshot(path=str(ARTIFACTS / "tools-panel-390.png"))


def test_a_denied_call_does_not_run_and_the_answer_goes_on(page, ui: RunningUI):
    if not any(s.name == "fixture" for s in configured()):
        open_tools(page)
        add_server(page, "fixture")
    else:
        open_tools(page)
    turn_on(page, "fixture", "echo")
    reply = ask(page, "Repeat the word no.")
    reply.get_by_role("button", name="Deny").click(timeout=LONG)
    expect(reply.locator("details.lc-call summary").last).to_contain_text("fixture · echo — denied", timeout=LONG)
    expect(reply).to_contain_text("TTFT", timeout=LONG)
    shot(page, "denied")


def test_stop_during_the_slow_tool_ends_the_call_and_the_answer(page, ui: RunningUI):
    open_tools(page)
    add_server(page, "slowfix", env="FIXTURE_SLOW_AT_LEAST=300")
    turn_on(page, "slowfix", "slow")
    reply = ask(page, "Wait a little.")
    reply.get_by_role("button", name="Allow once").click(timeout=LONG)
    expect(reply.locator("details.lc-call summary").last).to_contain_text("running", timeout=LONG)
    shot(page, "running")
    page.locator("#stop").click()
    expect(reply.locator("details.lc-call summary").last).to_contain_text("slowfix · slow — stopped", timeout=LONG)
    expect(page.locator("#chat .bot").last).to_contain_text("stopped")
