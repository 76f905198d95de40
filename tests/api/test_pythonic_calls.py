"""Llama 4's pythonic calls read back (api/pythonic.py), beside the corpus's fixtures
(tests/api/test_toolcall_corpus.py): what is not a list of calls stays content, as written, and hostile
text is never run, never a server error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localchat.api.pythonic import PythonicParser
from localchat.api.reader import reader_for
from localchat.api.tool_formats import PYTHONIC, detect_format
from localchat.api.tool_parser import ArgsDelta, CallStart
from localchat.runtime.templates.thinking import thinking_style

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
NAMES = {"get_weather", "get_time"}


def read(text: str, step: int, cut: bool = False) -> tuple[str, list[tuple[str, dict]]]:
    parser = PythonicParser(NAMES)
    pieces = []
    for i in range(0, len(text), step):
        pieces += parser.feed(text[i:i + step])
    pieces += parser.finish(cut)
    names = {p.index: p.name for p in pieces if isinstance(p, CallStart)}
    args = {p.index: json.loads(p.text) for p in pieces if isinstance(p, ArgsDelta)}
    assert [(c.name, json.loads(c.arguments)) for c in parser.calls] == [(names[i], args[i]) for i in sorted(names)]
    return "".join(p for p in pieces if isinstance(p, str)), [(names[i], args[i]) for i in sorted(names)]


def test_llama_4s_template_picks_the_pythonic_reader():
    source = (TEMPLATES / "llama-4-pythonic.jinja").read_text(encoding="utf-8")
    assert detect_format(source) is PYTHONIC
    reader = reader_for(thinking_style(source), "<|header_start|>assistant<|header_end|>\n\n", PYTHONIC, NAMES)
    pieces = reader.feed("<|python_start|>[get_weather(city='Paris', days=-2), get_time()]<|python_end|>")
    pieces += reader.finish()
    assert not [p for p in pieces if isinstance(p, str)]
    assert [(c.name, json.loads(c.arguments)) for c in reader.calls] == [("get_weather", {"city": "Paris", "days": -2}),
                                                                         ("get_time", {})]


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_several_calls_with_every_kind_of_literal_whole_and_streamed(step: int):
    text = ('[get_weather(city="Saint-Malo", when={"day": 1, "tags": ["a", \'b\']}, metric=None, ok=true), '
            'get_time(zone=\'UTC\', exact=False)]')
    assert read(text, step) == ("", [
        ("get_weather", {"city": "Saint-Malo", "when": {"day": 1, "tags": ["a", "b"]}, "metric": None, "ok": True}),
        ("get_time", {"zone": "UTC", "exact": False})])


@pytest.mark.parametrize("text", [
    "[1] is the first source.",
    "[Note] the weather is fine.",  # starts like a list of calls, but is not one: content as written
    "  Sure: [get_weather(city='Paris')]",  # calls come at the start of the reply or not at all
    "[get_weather(city=__import__('os').system('true'))]",  # never run: not a literal
    "[open_door(now=True)]",  # a tool the request does not offer
    "[get_weather('Paris')]",  # no argument names
    "[get_weather(city=1e999)]",  # not a number JSON can carry
    "[" * 400 + "get_weather(" + "(" * 400,
    "[get_weather(x=" + "[" * 3000 + "]" * 3000 + ")]",  # deeper than Python's parser goes
])
def test_what_is_not_a_list_of_offered_calls_is_content_as_written(text: str):
    for step in (1, 5, len(text)):
        assert read(text, step) == (text, [])


def test_a_list_cut_by_max_tokens_sends_no_call_and_no_markup():
    assert read("[get_weather(city='Paris'), get_time(zone='UT", 2, cut=True) == ("", [])
