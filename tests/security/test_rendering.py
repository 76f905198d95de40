"""Model output reaches the browser as text only, and a hostile chat template cannot hang the renderer."""

from __future__ import annotations

import threading
import time

import pytest

from localchat.errors import RequestError
from localchat.runtime.templates.chat_template import ChatTemplate
from localchat.ui.chat.render import inert

HELLO = [{"role": "user", "content": "Hello"}]


@pytest.mark.parametrize("attack", [
    "\\`<img src=http://127.0.0.1:9/leak?q=secret>\\`",  # escaped backticks open no code span
    "``<img src=http://127.0.0.1:9/a>` text",  # a run with no partner of its length is literal
    "`a\\` <img src=http://127.0.0.1:9/b> `",  # a backslash inside code is literal: the span ends at it
])
def test_escaped_backticks_let_no_html_through(attack: str):
    shown = inert(attack)
    assert "<img" not in shown and "&lt;img" in shown


def test_images_become_links():
    shown = inert("Look: ![chart](http://127.0.0.1:9/leak?data=secret) and ![ref][1]\n\n[1]: http://127.0.0.1:9/x")
    assert "![" not in shown.replace("\\![", "")  # every image is escaped into "!" and a link
    assert "(http://127.0.0.1:9/leak?data=secret)" in shown  # the link stays, to be clicked or not


def test_code_still_shows_as_written():
    text = "Use `<b>` for bold:\n```html\n<b>bold</b>\n```\nand ![img](x) in code: `![img](x)`"
    shown = inert(text)
    assert "`<b>`" in shown and "\n<b>bold</b>\n" in shown and "`![img](x)`" in shown


def test_rendering_output_is_linear():
    def cost(n: int) -> float:
        text = "` `` ``` ` " * n
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            inert(text)
            best = min(best, time.perf_counter() - started)
        return best

    small, large = cost(5_000), cost(20_000)
    assert large < 8 * small, f"4x the text took {large / small:.1f}x the time"


HOSTILE = {
    "nested ranges": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "huge string": "{{ 'x' * 1000000000 }}",
    "huge padding": "{{ 'x' | center(1000000000) }}",
    "huge method call": "{{ 'x'.ljust(1000000000) }}",
    "huge power": "{{ 2 ** 100000000 }}",
    "loop over a loop": "{% for m in messages %}{% for a in m.content * 1000 %}{% for b in m.content * 1000 %}"
                        "{% endfor %}{% endfor %}{% endfor %}",
    "doubling": "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
                "{{ ns.s }}",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_template_is_stopped(name: str):
    template = ChatTemplate(HOSTILE[name])
    outcome: list[BaseException | str] = []

    def render() -> None:
        try:
            outcome.append(template.render(HELLO))
        except BaseException as exc:  # noqa: BLE001 - the outcome is what the test checks
            outcome.append(exc)

    worker = threading.Thread(target=render, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), f"rendering {name!r} was still running after 60 s"
    assert isinstance(outcome[0], RequestError), outcome[0]
    assert "template" in str(outcome[0])


def test_an_ordinary_template_still_renders():
    template = ChatTemplate(None)  # ChatML
    assert template.render(HELLO) == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
