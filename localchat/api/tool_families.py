"""The tool-call forms of the families that write each call between markers of their own (not a bare JSON
object, which tool_parser.py reads): DeepSeek V3/R1/V3.1, Kimi K2, Qwen3-Coder's and GLM 4.5+'s XML,
Gemma 4, Mistral's newer `[TOOL_CALLS]name[ARGS]{…}`, Kimi K3's XTML elements. One row per family: its markers, how one call's
text reads back as (name, arguments), and how the grammar writes one (JSON-argument families).

Each reader takes one call's text, already cut out by its markers (api/section_parser.py), and works in
one pass with str.find and partition: model output is untrusted, so no backtracking regex.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from .json_values import JSONUnreadable, json_value
from .tool_xml import DSML, CallUnreadable, Schemas, glm_call, qwen_xml_call, read_dsml, xtml_call, xtml_whole

@dataclass(frozen=True, slots=True)
class SectionFormat:
    """A family that writes each call from one of `opens` to one of `closes` (none: the call runs to the next
    opener or the end), maybe inside a section whose own markers (`section`) are neither content nor call."""

    name: str
    detect: tuple[str, ...]  # all of these in the template source pick this family
    trigger: str  # where the calls start: the grammar's lazy trigger
    opens: tuple[str, ...]
    closes: tuple[str, ...]
    section: tuple[str, ...]
    # A call's text (from its opener, without its closer) -> its call(s); `cut`: max_tokens ended it.
    read: Callable[[str, Schemas, bool], list[tuple[str, dict[str, Any]]]]
    # Whether a call's text is whole when a closer comes (a closer written inside an argument is text).
    whole: Callable[[str], bool] = lambda text: True
    # The text the grammar writes before and after a call's JSON arguments (None: they are not JSON).
    head: Callable[[str, int], str] | None = None
    tail: str = ""
    extra_markers: tuple[str, ...] = ()  # markers inside a call that must never reach content
    short_ids: bool = False  # the template demands 9-character alphanumeric call ids (Mistral)
    native: bool = True  # every one of these templates renders tools, calls and results itself

    @property
    def markers(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.opens, *self.closes, *self.section, *self.extra_markers)))


def _strip_open(text: str, opens: tuple[str, ...]) -> str:
    for mark in opens:
        if text.startswith(mark):
            return text[len(mark):]
    return text


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json_value(text)
    except JSONUnreadable as exc:
        raise CallUnreadable(f"its arguments: the text {exc}") from None
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


def _one(read: Callable[[str, Schemas], tuple[str, dict[str, Any]]], opens: tuple[str, ...]
         ) -> Callable[[str, Schemas, bool], list]:
    """A reader of one call per opener, its opener cut off (a call cut by max_tokens is no call)."""
    def one(text: str, schemas: Schemas, cut: bool) -> list[tuple[str, dict[str, Any]]]:
        if cut:
            return []
        return [read(_strip_open(text, opens), schemas)]
    return one


def read_mistral(text: str, schemas: Schemas, cut: bool) -> list[tuple[str, dict[str, Any]]]:
    """`name[ARGS]{...}` (Mistral Small 3.2, Magistral, Devstral), or the older JSON list of calls
    (`[{"name": ..., "arguments": {...}}, ...]`) that the same models still write at times."""
    if cut:
        return []
    text = _strip_open(text, ("[TOOL_CALLS]",))
    body = text.strip()
    if not body.startswith(("[", "{")):
        return [_mistral_args(text, schemas)]
    try:
        value = json_value(body)
    except JSONUnreadable as exc:
        raise CallUnreadable(f"its calls: the text {exc}") from None
    calls = []
    for call in value if isinstance(value, list) else [value]:
        args = call.get("arguments", call.get("parameters")) if isinstance(call, dict) else None
        if isinstance(args, str):
            args = _json_object(args)
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not isinstance(args, dict):
            raise CallUnreadable("a call lacks a name or an arguments object")
        calls.append((call["name"], args))
    return calls


QWEN_XML_OPENS = ("<tool_call>", "<function=")  # Qwen3-Coder at times leaves out the <tool_call>


def _qwen_xml_whole(text: str) -> bool:
    return text.rstrip().endswith("</function>") or not text.lstrip().startswith(QWEN_XML_OPENS)


def _glm_whole(text: str) -> bool:
    body = text.rstrip()
    return "<arg_key>" not in body or body.endswith("</arg_value>")


def _gemma_whole(text: str) -> bool:
    return text.count(GEMMA_QUOTE) % 2 == 0  # a closer inside a <|"|> string is text


def _mistral_whole(text: str) -> bool:
    body = _strip_open(text, ("[TOOL_CALLS]",))
    return _json_after("[ARGS]" if "[ARGS]" in body else "")(body)


def _json_after(separator: str) -> Callable[[str], bool]:
    """A call is whole when the JSON after `separator` is (a closer inside a JSON string is text)."""
    def whole(text: str) -> bool:
        args = _unfenced(text.partition(separator)[2] if separator else text)
        try:
            json_value(args)
        except JSONUnreadable:
            return False
        return True
    return whole


def _deepseek_whole(text: str) -> bool:
    right = text.partition("<｜tool▁sep｜>")[2]
    left, _, after = right.partition("\n")
    return _json_after("")(after if text.partition("<｜tool▁sep｜>")[0].strip().endswith("function") else right)


DSML_SECTIONS = tuple(f"<{DSML}{space}{name}>" for name in ("function_calls", "tool_calls", "calls")
                      for space in ("", " "))
DSML_ENDS = tuple(f"</{DSML}{space}{name}>" for name in ("function_calls", "tool_calls", "calls")
                  for space in ("", " "))

SECTION_FORMATS = (
    # V3.2 opens its section with function_calls, V4 with tool_calls; both read either.
    SectionFormat("deepseek-dsml", (DSML, "function_calls"), DSML_SECTIONS[0], DSML_SECTIONS, DSML_ENDS, (),
                  read_dsml),
    SectionFormat("deepseek-dsml", (DSML,), DSML_SECTIONS[2], DSML_SECTIONS[2:] + DSML_SECTIONS[:2],
                  DSML_ENDS[2:] + DSML_ENDS[:2], (), read_dsml),
    # V3 and the R1 distills write `function<｜tool▁sep｜>NAME` and fenced JSON; V3.1 `NAME<｜tool▁sep｜>{...}`.
    # One reader takes both; the grammar writes the form the template does.
    SectionFormat("deepseek", ("tool▁calls▁begin", "```json"), "<｜tool▁calls▁begin｜>", ("<｜tool▁call▁begin｜>",),
                  ("<｜tool▁call▁end｜>",), ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"),
                  _one(_deepseek, ("<｜tool▁call▁begin｜>",)), whole=_deepseek_whole,
                  head=lambda name, i: f"function<｜tool▁sep｜>{name}\n```json\n", tail="\n```",
                  extra_markers=("<｜tool▁sep｜>",)),
    SectionFormat("deepseek-v3.1", ("tool▁calls▁begin",), "<｜tool▁calls▁begin｜>", ("<｜tool▁call▁begin｜>",),
                  ("<｜tool▁call▁end｜>",), ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"),
                  _one(_deepseek, ("<｜tool▁call▁begin｜>",)), whole=_deepseek_whole,
                  head=lambda name, i: f"{name}<｜tool▁sep｜>", extra_markers=("<｜tool▁sep｜>",)),
    SectionFormat("kimi", ("<|tool_calls_section_begin|>",), "<|tool_calls_section_begin|>",
                  ("<|tool_call_begin|>",), ("<|tool_call_end|>",),
                  ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"), _one(_kimi, ("<|tool_call_begin|>",)),
                  whole=_json_after("<|tool_call_argument_begin|>"),
                  head=lambda name, i: f"functions.{name}:{i} <|tool_call_argument_begin|>",
                  extra_markers=("<|tool_call_argument_begin|>",)),
    # Kimi K3: a tools element after the response element; its template builds the tags with open_tag().
    SectionFormat("kimi-k3", ("<|open|>", "open_tag('call'"), "<|open|>tools<|sep|>", ("<|open|>call",),
                  ("<|close|>call<|sep|>",), ("<|open|>tools<|sep|>", "<|close|>tools<|sep|>"), _one(xtml_call, ()),
                  whole=xtml_whole),
    SectionFormat("qwen3-xml", ("<function=", "<parameter="), "<tool_call>", QWEN_XML_OPENS, ("</tool_call>",), (),
                  _one(qwen_xml_call, ()), whole=_qwen_xml_whole),
    SectionFormat("glm", ("<arg_key>",), "<tool_call>", ("<tool_call>",), ("</tool_call>",), (),
                  _one(glm_call, ("<tool_call>",)), whole=_glm_whole),
    SectionFormat("gemma4", ("<|tool_call>",), "<|tool_call>", ("<|tool_call>",), ("<tool_call|>",), (),
                  _one(_gemma4, ("<|tool_call>",)), whole=_gemma_whole, extra_markers=(GEMMA_QUOTE,)),
    SectionFormat("mistral-args", ("[TOOL_CALLS]", "[ARGS]"), "[TOOL_CALLS]", ("[TOOL_CALLS]",), (), (),
                  read_mistral, whole=_mistral_whole, head=lambda name, i: f"{name}[ARGS]", short_ids=True, extra_markers=("[ARGS]", "[CALL_ID]")),
)


def detect_section_format(template_source: str) -> SectionFormat | None:
    """The family of these whose markers the template carries, or None."""
    for fmt in SECTION_FORMATS:
        if all(mark in template_source for mark in fmt.detect):
            return fmt
    return None
