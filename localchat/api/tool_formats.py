"""How each model family writes tool calls: detected from its chat template, one table row per family.

A native family's template renders the tools and past calls itself; for a template without tool
support (SmolLM2's, Gemma's) the tools are described in a system message and calls are written in
the generic `<tool_call>` JSON form. Either way the model's calls are text the parser reads back
(tool_parser.py) and the grammar here forces once a call opens.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ..runtime.constraints.schema_grammar import Converter, gbnf_of
from .tool_families import SectionFormat, detect_section_format

MAX_PARALLEL = 8  # calls in one answer: a small model may otherwise repeat a call until max_tokens


@dataclass(frozen=True, slots=True)
class ToolFormat:
    """One family's way of writing calls. The grammar writes `open`, then each call as
    `before` + {"name": ..., args_key: {...}} + `after`, `between` between calls, then `close`."""

    name: str
    detect: tuple[str, ...]  # all of these in the template source pick this family
    trigger: str  # the text that opens the calls: the grammar's lazy trigger, the parser's cue
    open: str
    before: str
    after: str
    between: str
    close: str
    args_key: str
    markers: tuple[str, ...]  # text the parser skips between call objects
    native: bool  # the template renders tools, tool_calls and tool results itself
    short_ids: bool = False  # the template demands 9-character alphanumeric call ids (Mistral)
    silent: tuple[str, ...] = ()  # markers that may come before the trigger and are never content


HERMES = ToolFormat("hermes", ("<tool_call>", "tools"), "<tool_call>", "", "<tool_call>\n", "\n</tool_call>",
                    "\n", "", "arguments", ("<tool_call>", "</tool_call>"), native=True)
# gpt-oss: its template renders tools and calls itself; api/harmony.py reads its calls, family_grammar.py
# forces them. The JSON layout fields are unused.
HARMONY = ToolFormat("harmony", ("<|channel|>", "<|message|>"), "to=functions.", "", "", "", "", "", "arguments",
                     (), native=True)
# Llama 4: a Python list of calls, `[f(a=1), g()]` (its header markers pick it); api/pythonic.py reads it. The
# JSON layout fields are unused.
PYTHONIC = ToolFormat("pythonic", ("<|header_start|>",), "[", "[", "", "", ", ", "]", "arguments",
                      ("<|python_start|>", "<|python_end|>"), native=True)
FORMATS = (
    HARMONY,
    PYTHONIC,
    ToolFormat("mistral", ("[TOOL_CALLS]", "tools"), "[TOOL_CALLS]", "[TOOL_CALLS][", "", "", ", ", "]",
               "arguments", ("[TOOL_CALLS]", "[", "]", ","), native=True, short_ids=True),
    HERMES,  # Qwen2.5, Qwen3, Hermes 2/3
    ToolFormat("llama3", ("<|python_tag|>", "tools"), '{"name"', "", "", "", "; ", "", "parameters",
               ("<|python_tag|>", ";"), native=True, silent=("<|python_tag|>",)),
    ToolFormat("gemma", ("<start_of_turn>",), "<tool_call>", "", "<tool_call>\n", "\n</tool_call>", "\n", "",
               "arguments", ("<tool_call>", "</tool_call>"), native=False),
)
GENERIC = ToolFormat("generic", (), "<tool_call>", "", "<tool_call>\n", "\n</tool_call>", "\n", "",
                     "arguments", ("<tool_call>", "</tool_call>"), native=False)


def detect_format(template_source: str) -> "ToolFormat | SectionFormat":
    """The family whose markers the template carries: a family that writes each call between markers of its
    own (tool_families.py) before the JSON-object families here, whose markers some of them share."""
    return detect_section_format(template_source) or detect(template_source)


def detect(template_source: str) -> ToolFormat:
    """The family whose markers the template carries; the generic JSON form when none."""
    for fmt in FORMATS:
        if all(mark in template_source for mark in fmt.detect):
            return fmt
    return GENERIC


def call_head(fmt: ToolFormat, name: str) -> str:
    """What the grammar writes before a call's arguments: the arguments' JSON starts right after it."""
    return '{"name": ' + json.dumps(name) + f', "{fmt.args_key}": '


def tool_schema(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool's parameter schema (none: an object without properties)."""
    return tool["function"].get("parameters") or {"type": "object", "properties": {}}


def call_gbnf(fmt: ToolFormat, tools: list[dict[str, Any]], parallel: bool,
              param: str = "tools") -> tuple[str, list[str]]:
    """A grammar for one (or, with `parallel`, several) calls of `tools`, in `fmt`'s layout, and what it
    leaves to the check."""

    def build(conv: Converter) -> str:
        alternatives = []
        for i, tool in enumerate(tools):
            args = conv.visit(conv.resolve_refs(tool_schema(tool), f"tool{i}"), f"tool{i}-args")
            head = conv._format_literal(call_head(fmt, tool["function"]["name"]))
            alternatives.append(conv._add_rule(f"tool{i}-call", f'{head} {args} "}}"'))
        call = conv._add_rule("call", " | ".join(alternatives))
        one = " ".join(filter(None, (_lit(conv, fmt.before), call, _lit(conv, fmt.after))))
        more = f" ({_lit(conv, fmt.between)} {one}){{0,{MAX_PARALLEL - 1}}}" if parallel else ""
        return " ".join(filter(None, (_lit(conv, fmt.open), f"{one}{more}", _lit(conv, fmt.close))))

    return gbnf_of(build, "the tools' parameter schemas", param)


def _lit(conv: Converter, text: str) -> str:
    return conv._format_literal(text) if text else ""


def call_text(fmt: ToolFormat, calls: list[tuple[str, Any]]) -> str:
    """Past calls (name, arguments) written as the model would have written them (generic form)."""
    written = [fmt.before + json.dumps({"name": name, fmt.args_key: args}, ensure_ascii=False) + fmt.after
               for name, args in calls]
    return fmt.open + fmt.between.join(written) + fmt.close


def short_id(call_id: str) -> str:
    """A stable 9-character alphanumeric stand-in for a client's call id (Mistral's templates demand it)."""
    return hashlib.sha256(call_id.encode()).hexdigest()[:9]


def describe_tools(tools: list[dict[str, Any]], fmt: ToolFormat) -> str:
    """The system text that teaches a template without tool support how to call (the generic form)."""
    listed = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools)
    example = call_text(fmt, [("<tool name>", {"<argument>": "<value>"})])
    return (f"You can call these tools (JSON schemas of their arguments):\n{listed}\n"
            f"To call a tool, answer with only this, filled in:\n{example}\n"
            "Otherwise answer normally.")
