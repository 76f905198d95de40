"""The tool-call forms of the families that write each call between markers of their own (not a bare JSON
object, which tool_parser.py reads): DeepSeek V3/R1/V3.1, Kimi K2, Qwen3-Coder's and GLM 4.5+'s XML,
Gemma 4, Mistral's newer `[TOOL_CALLS]name[ARGS]{…}`. One row per family: its markers, how one call's
text reads back as (name, arguments), and how the grammar writes one (JSON-argument families).

Each reader takes one call's text, already cut out by its markers (api/section_parser.py), and works in
one pass with str.find and partition: model output is untrusted, so no backtracking regex.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

Schemas = dict[str, dict[str, Any]]  # tool name -> its parameters schema


class CallUnreadable(ValueError):
    """The text between a call's markers is not a call of its family."""


@dataclass(frozen=True, slots=True)
class SectionFormat:
    """A family that writes each call between `call_open` and `call_close` (no close: the call runs to the
    next open or the end), optionally inside a section (`section_open` ... `section_close`)."""

    name: str
    detect: tuple[str, ...]  # all of these in the template source pick this family
    section_open: str  # the trigger: where the calls start
    call_open: str
    call_close: str | None
    section_close: str | None
    read: Callable[[str, Schemas], list[tuple[str, dict[str, Any]]]]  # one call's text -> its call(s)
    # The text the grammar writes around a call's JSON arguments (None: arguments are not JSON).
    head: Callable[[str, int], str] | None = None
    tail: str = ""
    extra_markers: tuple[str, ...] = ()  # markers inside a call that must never reach content

    @property
    def trigger(self) -> str:
        return self.section_open

    @property
    def markers(self) -> tuple[str, ...]:
        found = (self.section_open, self.call_open, self.call_close, self.section_close, *self.extra_markers)
        return tuple(m for m in found if m)


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise CallUnreadable("its arguments are not JSON") from None
    if not isinstance(value, dict):
        raise CallUnreadable("its arguments are not a JSON object")
    return value


def _unfenced(text: str) -> str:
    """Arguments inside a Markdown code fence (```json ... ```), as DeepSeek V3 and R1 write them."""
    text = text.strip()
    if text.startswith("```"):
        text = text[3:]
        text = text[4:] if text.startswith("json") else text
        text = text[:-3] if text.rstrip().endswith("```") else text
        text = text.rstrip()
        if text.endswith("```"):
            text = text[:-3]
    return text.strip()


def _deepseek(text: str, schemas: Schemas) -> tuple[str, dict[str, Any]]:
    # V3/R1: function<｜tool▁sep｜>NAME\n```json\n{...}\n```   V3.1: NAME<｜tool▁sep｜>{...}
    left, sep, right = text.partition("<｜tool▁sep｜>")
    if not sep:
        raise CallUnreadable("no separator between its name and arguments")
    if left.strip() in ("function", ""):
        name, _, args = right.strip().partition("\n")
        return name.strip(), _json_object(_unfenced(args))
    return left.strip(), _json_object(_unfenced(right))


def _kimi(text: str, schemas: Schemas) -> tuple[str, dict[str, Any]]:
    # functions.NAME:INDEX <|tool_call_argument_begin|>{...}
    head, sep, args = text.partition("<|tool_call_argument_begin|>")
    if not sep:
        raise CallUnreadable("no arguments")
    name = head.strip()
    name = name[len("functions."):] if name.startswith("functions.") else name
    base, colon, index = name.rpartition(":")
    return (base if colon and index.isdigit() else name), _json_object(args)


def _typed(value: str, name: str, tool: str, schemas: Schemas) -> Any:
    """An XML parameter's text as the schema's type: a string stays as written, anything else is JSON when
    it reads as JSON (1, true, {...}), else the text."""
    kind = ((schemas.get(tool) or {}).get("properties") or {}).get(name, {}).get("type")
    if kind == "string" or (isinstance(kind, list) and "string" in kind and value.strip() not in ("null",)):
        return value
    try:
        return json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        return value


def _between(text: str, start: str, end: str, pos: int) -> tuple[str, int] | None:
    at = text.find(start, pos)
    if at < 0:
        return None
    stop = text.find(end, at + len(start))
    if stop < 0:
        raise CallUnreadable(f"a {start!r} is not closed")
    return text[at + len(start):stop], stop + len(end)


def _trim_one_newline(value: str) -> str:
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


def _qwen3_xml(text: str, schemas: Schemas) -> tuple[str, dict[str, Any]]:
    # <function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>
    found = _between(text, "<function=", ">", 0)
    if found is None:
        raise CallUnreadable("no <function=...>")
    name, pos = found
    args: dict[str, Any] = {}
    while True:
        key = _between(text, "<parameter=", ">", pos)
        if key is None:
            break
        value = _between(text, "", "</parameter>", key[1])
        assert value is not None
        args[key[0].strip()] = _typed(_trim_one_newline(value[0]), key[0].strip(), name.strip(), schemas)
        pos = value[1]
    return name.strip(), args


def _glm(text: str, schemas: Schemas) -> tuple[str, dict[str, Any]]:
    # NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>...
    at = text.find("<arg_key>")
    name = (text if at < 0 else text[:at]).strip()
    args: dict[str, Any] = {}
    pos = max(at, 0)
    while at >= 0:
        key = _between(text, "<arg_key>", "</arg_key>", pos)
        if key is None:
            break
        start = text.find("<arg_value>", key[1])
        if start < 0:
            raise CallUnreadable(f"the argument {key[0]!r} has no value")
        stop = text.find("</arg_value>", start)
        nxt = text.find("<arg_key>", start)
        # A value cut short of its closing tag runs to the next key (GLM 4.7 drops it at times).
        end = stop if stop >= 0 and (nxt < 0 or stop < nxt) else (nxt if nxt >= 0 else len(text))
        args[key[0].strip()] = _typed(text[start + len("<arg_value>"):end], key[0].strip(), name, schemas)
        pos = end + (len("</arg_value>") if end == stop else 0)
    if not name:
        raise CallUnreadable("no name")
    return name, args


GEMMA_QUOTE = '<|"|>'


def _gemma4(text: str, schemas: Schemas) -> tuple[str, dict[str, Any]]:
    # call:NAME{key:<|"|>text<|"|>,n:3,list:[...],obj:{...}}
    text = text.strip()
    if not text.startswith("call:") or "{" not in text:
        raise CallUnreadable("not a call:NAME{...}")
    brace = text.index("{")
    name, body = text[len("call:"):brace].strip(), text[brace:]
    out: list[str] = []
    stack: list[str] = []  # the brackets open: a ',' inside an object is followed by a bare key
    pos, expect_key = 0, False
    while pos < len(body):
        if body.startswith(GEMMA_QUOTE, pos):
            end = body.find(GEMMA_QUOTE, pos + len(GEMMA_QUOTE))
            if end < 0:
                raise CallUnreadable("a string is not closed")
            out.append(json.dumps(body[pos + len(GEMMA_QUOTE):end], ensure_ascii=False))
            pos, expect_key = end + len(GEMMA_QUOTE), False
            continue
        char = body[pos]
        if char in "{[":
            stack.append(char)
            expect_key = char == "{"
        elif char in "}]":
            if stack:
                stack.pop()
            expect_key = False
        elif char == ",":
            expect_key = bool(stack) and stack[-1] == "{"
        elif expect_key and not char.isspace():
            colon = body.find(":", pos)
            if colon < 0:
                raise CallUnreadable("a key has no value")
            out.append(json.dumps(body[pos:colon].strip(), ensure_ascii=False) + ":")
            pos, expect_key = colon + 1, False
            continue
        out.append(char)
        pos += 1
    return name, _json_object("".join(out))


def _mistral_args(text: str, schemas: Schemas) -> tuple[str, dict[str, Any]]:
    # NAME[ARGS]{...}, or NAME[CALL_ID]ID[ARGS]{...}
    head, sep, args = text.partition("[ARGS]")
    if not sep:
        raise CallUnreadable("no [ARGS]")
    name = head.partition("[CALL_ID]")[0].strip()
    return name, _json_object(args.strip())


def _one(read: Callable[[str, Schemas], tuple[str, dict[str, Any]]]) -> Callable[[str, Schemas], list]:
    return lambda text, schemas: [read(text, schemas)]


def read_mistral(text: str, schemas: Schemas) -> list[tuple[str, dict[str, Any]]]:
    """`name[ARGS]{...}` (Mistral Small 3.2, Magistral, Devstral), or the older JSON list of calls
    (`[{"name": ..., "arguments": {...}}, ...]`) that the same models still write at times."""
    body = text.strip()
    if not body.startswith(("[", "{")):
        return [_mistral_args(text, schemas)]
    try:
        value = json.loads(body)
    except (json.JSONDecodeError, RecursionError):
        raise CallUnreadable("its calls are not JSON") from None
    calls = []
    for call in value if isinstance(value, list) else [value]:
        args = call.get("arguments", call.get("parameters")) if isinstance(call, dict) else None
        if isinstance(args, str):
            args = _json_object(args)
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not isinstance(args, dict):
            raise CallUnreadable("a call lacks a name or an arguments object")
        calls.append((call["name"], args))
    return calls


SECTION_FORMATS = (
    SectionFormat("deepseek", ("tool▁calls▁begin",), "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>",
                  "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", _one(_deepseek),
                  head=lambda name, i: f"function<｜tool▁sep｜>{name}\n```json\n", tail="\n```",
                  extra_markers=("<｜tool▁sep｜>",)),
    SectionFormat("kimi", ("<|tool_calls_section_begin|>",), "<|tool_calls_section_begin|>",
                  "<|tool_call_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>", _one(_kimi),
                  head=lambda name, i: f"functions.{name}:{i} <|tool_call_argument_begin|>",
                  extra_markers=("<|tool_call_argument_begin|>",)),
    SectionFormat("qwen3-xml", ("<function=", "<parameter="), "<tool_call>", "<tool_call>", "</tool_call>", None,
                  _one(_qwen3_xml)),
    SectionFormat("glm", ("<arg_key>",), "<tool_call>", "<tool_call>", "</tool_call>", None, _one(_glm)),
    SectionFormat("gemma4", ("<|tool_call>",), "<|tool_call>", "<|tool_call>", "<tool_call|>", None, _one(_gemma4),
                  extra_markers=(GEMMA_QUOTE,)),
    SectionFormat("mistral-args", ("[TOOL_CALLS]", "[ARGS]"), "[TOOL_CALLS]", "[TOOL_CALLS]", None, None,
                  read_mistral, head=lambda name, i: f"{name}[ARGS]", extra_markers=("[ARGS]", "[CALL_ID]")),
)


def detect_section_format(template_source: str) -> SectionFormat | None:
    """The family of these whose markers the template carries, or None."""
    for fmt in SECTION_FORMATS:
        if all(mark in template_source for mark in fmt.detect):
            return fmt
    return None
