"""Every family's call reader on hostile values: a call written in the family's own form (its real template
renders a past call, so each family writes it its own way) whose argument is 1,040 levels deep, 990 levels
deep (Python parses it, then fails to write it out again) or an integer of 5,000 digits. The readers promise
that what they cannot read comes back as content: never a RecursionError or ValueError (a 500 on the route)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from localchat.api.constraints import constrain
from localchat.api.reader import reader_for
from localchat.api.tool_parser import ArgsDelta, CallStart
from localchat.runtime.templates.chat_template import ChatTemplate
from localchat.runtime.templates.thinking import thinking_style

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"}, "days": {"type": "integer"},
                                                "where": {}}}}}
MARK = "0xHOSTILE0"
HOSTILE = {
    "deep array": "[" * 1040 + "]" * 1040,
    "parses, then too deep to write": "[" * 990 + "]" * 990,
    "deep object": '{"a": ' * 1040 + "1" + "}" * 1040,
    "5,000 digits": "9" * 5000,
    "negative 5,000 digits": "-" + "9" * 5000,
}


def written_call(name: str) -> tuple[str, str]:
    """(the prompt up to the answer, the answer): a past call of get_weather as the template `name` writes it,
    its arguments holding MARK where the hostile value goes."""
    template = ChatTemplate((TEMPLATES / name).read_text(encoding="utf-8"), "<s>", "</s>")
    args = json.dumps({"city": "Paris", "days": MARK, "where": MARK})
    chat = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_abc123", "type": "function", "function": {"name": "get_weather", "arguments": args}}]}]
    plan = constrain(chat, template.source, [WEATHER], "auto", True, None)
    full = str(template.render(plan.messages, add_generation_prompt=False, tools=plan.tools))
    asked = str(template.render(plan.messages[:1], tools=plan.tools))
    start = len(os.path.commonprefix([asked, full]))
    assert MARK in full[start:], (name, full[start:])
    return full[:start], full[start:]


@pytest.mark.parametrize("hostile", sorted(HOSTILE))
@pytest.mark.parametrize("name", sorted(p.name for p in TEMPLATES.glob("*.jinja")))
def test_a_hostile_value_in_a_familys_call_comes_back_as_content_or_a_call(name: str, hostile: str):
    prompt, answer = written_call(name)
    source = (TEMPLATES / name).read_text(encoding="utf-8")
    fmt = constrain([{"role": "user", "content": "hi"}], source, [WEATHER], "auto", True, None).fmt
    text = answer.replace(f'"{MARK}"', HOSTILE[hostile]).replace(MARK, HOSTILE[hostile])
    for step in (len(text), 97):  # whole, and streamed in pieces
        reader = reader_for(thinking_style(source), prompt, fmt, {"get_weather"},
                            {"get_weather": WEATHER["function"]["parameters"]})
        assert reader is not None
        pieces = []
        for at in range(0, len(text), step):
            pieces += reader.feed(text[at:at + step])
        pieces += reader.finish()
        content = "".join(p for p in pieces if isinstance(p, str))
        streamed = "".join(p.text for p in pieces if isinstance(p, ArgsDelta))
        for call in reader.calls:  # a call read at all is one a client can parse and write again
            json.dumps(json.loads(call.arguments))
        # Read as a call, given back as content, or (gpt-oss's harmony, whose calls are no text) said broken.
        assert reader.calls or content.strip() or reader.broken, (name, hostile, step)
        assert len([p for p in pieces if isinstance(p, CallStart)]) == len(reader.calls) or reader.broken
        assert streamed or not reader.calls or reader.broken
