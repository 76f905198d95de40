"""What a chat request asks beyond text: tools, tool_choice, response_format; and the messages and
grammar that follow from them for this model's template.

Whatever is accepted is enforced: calls and structured answers are sampled under a grammar from
their schemas, and what a grammar cannot express is checked on the finished answer, which the engine
resamples until it passes (runtime/constraints/resample.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, RequestError
from ..runtime.constraints.grammar import Grammar
from ..runtime.constraints.schema_check import SchemaCheck
from .family_grammar import harmony_gbnf, pythonic_gbnf, section_gbnf
from .structured import MAX_SCHEMA_BYTES, check_schema, schema_grammar
from .tool_families import SectionFormat
from .tool_formats import (
    HARMONY,
    PYTHONIC,
    ToolFormat,
    call_gbnf,
    call_head,
    call_text,
    describe_tools,
    detect_format,
    short_id,
    tool_schema,
)

MAX_TOOLS = 128
MAX_TOOLS_BYTES = 256_000
MAX_GRAMMAR_CHARS = 64_000  # a raw GBNF `grammar` field on /v1/completions
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(slots=True)
class Constrained:
    """A chat request prepared for the template and the sampler."""

    fmt: ToolFormat | SectionFormat
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None  # for a native template; None: none, or described in text
    names: set[str] = field(default_factory=set)  # tools whose calls are read back; empty: no parsing
    gbnf: str | None = None
    triggers: tuple[str, ...] = ()  # empty: the grammar holds from the first token
    check: SchemaCheck | None = None  # what the grammar leaves to the finished answer's check


def grammar_of(plan: Constrained) -> Grammar | None:
    return Grammar(plan.gbnf, plan.triggers, plan.check) if plan.gbnf is not None else None


def schema_file_grammar(path: str) -> Grammar:
    """The grammar for the JSON schema in a file (`localchat chat --json-schema FILE`)."""
    try:
        text = Path(path).read_text(encoding="utf-8")[:MAX_SCHEMA_BYTES + 1]
        schema = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"--json-schema {path}: cannot read a JSON schema there ({exc}).") from None
    try:
        return schema_grammar(schema, "--json-schema")
    except RequestError as exc:
        raise ConfigError(f"--json-schema {path}: {exc}") from None


def response_grammar(response_format: dict[str, Any] | None, param: str | None = None) -> Grammar | None:
    """The grammar (and check) a response_format asks for: None for text. `param`: where the request
    put the format when its protocol calls it otherwise (Ollama's `format`)."""
    kind = (response_format or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return schema_grammar({"type": "object"}, param or "response_format")
    if kind == "json_schema":
        spec = response_format.get("json_schema")  # type: ignore[union-attr]
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
            raise RequestError("response_format json_schema needs {'json_schema': {'name': ..., 'schema': {...}}}.",
                               "response_format.json_schema.schema")
        return schema_grammar(spec["schema"], param or "response_format.json_schema.schema")
    raise RequestError(f"response_format {kind!r} is not supported; use 'text', 'json_object' or 'json_schema'.",
                       "response_format")


def raw_grammar(grammar: Any) -> Grammar | None:
    """A client's own GBNF (the llama.cpp servers' `grammar` field), bounded."""
    if grammar is None or grammar == "":
        return None
    if not isinstance(grammar, str) or len(grammar) > MAX_GRAMMAR_CHARS:
        raise RequestError(f"grammar must be GBNF text of at most {MAX_GRAMMAR_CHARS:,} characters.", "grammar")
    return Grammar(grammar)


def check_tools(tools: Any) -> list[dict[str, Any]]:
    """The request's tools, each a function with a name and an enforceable parameter schema."""
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        raise RequestError(f"tools must be a list of at most {MAX_TOOLS} functions.", "tools")
    try:
        size = len(json.dumps(tools))
    except (TypeError, ValueError, RecursionError):
        raise RequestError("tools must be plain JSON that does not nest too deeply.", "tools") from None
    if size > MAX_TOOLS_BYTES:  # every schema becomes grammar rules, built before the request queues
        raise RequestError(f"the tools are {size:,} bytes of JSON; send at most {MAX_TOOLS_BYTES:,}.", "tools")
    names = set()
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or tool.get("type", "function") != "function":
            raise RequestError(f"tools.{i} must be {{'type': 'function', 'function': {{'name': ..., "
                               "'parameters': {...}}}.", f"tools.{i}")
        name = function.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name) or name in names:
            raise RequestError(f"tools.{i}.function.name must be a unique name of 1-64 letters, digits, '_' "
                               "or '-'.", f"tools.{i}.function.name")
        names.add(name)
        parameters = function.get("parameters")
        if parameters is not None:
            check_schema(parameters, f"tools.{i}.function.parameters")
            if parameters.get("type", "object") != "object":
                raise RequestError(f"tools.{i}.function.parameters must describe an object.",
                                   f"tools.{i}.function.parameters")
    return tools


def choose(tools: list[dict[str, Any]], tool_choice: Any) -> tuple[str, list[dict[str, Any]]]:
    """The mode (auto | none | required) and the tools the model may call in it."""
    if tool_choice is None or tool_choice in ("auto", "none", "required"):
        return tool_choice or "auto", tools
    name = (tool_choice.get("function") or {}).get("name") if isinstance(tool_choice, dict) else None
    chosen = [t for t in tools if t["function"]["name"] == name]
    if not chosen:
        raise RequestError(f"tool_choice names {name!r}, which is not among the tools.", "tool_choice")
    return "required", chosen


def constrain(messages: list[dict[str, Any]], template_source: str, tools: Any, tool_choice: Any,
              parallel: bool | None, response_format: dict[str, Any] | None,
              format_param: str | None = None) -> Constrained:
    """Messages for the template, the tools it shows, and the grammar for this request."""
    fmt = detect_format(template_source)
    mode, callable_tools = choose(check_tools(tools), tool_choice) if tools else ("none", [])
    answer = response_grammar(response_format, format_param)
    if answer is not None and mode != "none":
        named = format_param or "response_format"
        raise RequestError(f"{named} with tools is not supported; send one or the other (or "
                           "tool_choice 'none').", named)
    shown = tools if mode != "none" else None
    plan = Constrained(fmt, template_messages(messages, fmt, shown), shown if fmt.native else None)
    if answer is not None:
        plan.gbnf, plan.check = answer.gbnf, answer.check
    if mode != "none":
        plan.names = {t["function"]["name"] for t in callable_tools}
        plan.triggers = (fmt.trigger,) if mode == "auto" else ()
        if fmt is PYTHONIC:
            # A list of calls opens with `[`, which text may hold anywhere: forced when a call is required (from
            # the first token), read back otherwise.
            plan.triggers = ()
            if mode == "required":
                plan.gbnf, _ = pythonic_gbnf(callable_tools, parallel is not False)
            return plan
        if isinstance(fmt, SectionFormat) or fmt is HARMONY:
            # The family's own form: its schema check is not written for it, so only what the grammar
            # enforces holds.
            plan.gbnf, _ = (harmony_gbnf(callable_tools, required=mode == "required") if fmt is HARMONY else
                            section_gbnf(fmt, callable_tools, parallel is not False))
            return plan
        plan.gbnf, left = call_gbnf(fmt, callable_tools, parallel is not False)
        plan.check = SchemaCheck({t["function"]["name"]: tool_schema(t) for t in callable_tools}, bool(left),
                                 "tools", {t["function"]["name"]: call_head(fmt, t["function"]["name"])
                                           for t in callable_tools}, fmt.trigger)
    return plan


def template_messages(messages: list[dict[str, Any]], fmt: ToolFormat | SectionFormat,
                      tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """OpenAI messages (tool calls, tool results) as this family's template expects them."""
    names: dict[str, str] = {}  # call id -> tool name, for the results that answer them
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        role, text = message["role"], message["content"]
        if role == "assistant" and message.get("tool_calls"):
            calls = [_call(call, f"messages.{i}.tool_calls.{j}") for j, call in enumerate(message["tool_calls"])]
            names.update((call_id, name) for call_id, name, _ in calls)
            if fmt.native:
                out.append(_thought({"role": "assistant", "content": text, "tool_calls": [
                    {"id": _id(fmt, call_id), "type": "function", "function": {"name": name, "arguments": args}}
                    for call_id, name, args in calls]}, message, fmt))
            else:
                written = call_text(fmt, [(name, args) for _, name, args in calls])
                out.append({"role": "assistant", "content": f"{text}\n{written}" if text else written})
        elif role == "tool":
            call_id = message.get("tool_call_id") or ""
            if fmt.native:
                out.append({"role": "tool", "content": text, "tool_call_id": _id(fmt, call_id),
                            "name": names.get(call_id, "")})
            else:
                out.append({"role": "user", "content": f"<tool_response>\n{text}\n</tool_response>"})
        elif role == "assistant":
            out.append(_thought({"role": role, "content": text}, message, fmt))
        else:
            out.append({"role": role, "content": text})
    if tools and not fmt.native:
        described = describe_tools(tools, fmt)
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{described}"}
        else:
            out.insert(0, {"role": "system", "content": described})
    return out if fmt.native else _merge_turns(out)


def _thought(out: dict[str, Any], message: dict[str, Any], fmt: ToolFormat | SectionFormat) -> dict[str, Any]:
    """An earlier answer's thinking (the neutral `reasoning`) where templates look for it: `reasoning_content`
    (Qwen3, GLM, Kimi, DeepSeek) or harmony's `thinking`. The template keeps it or leaves it out as its
    model was trained (Qwen3 keeps only the turns after the last question)."""
    reasoning = message.get("reasoning")
    if not isinstance(reasoning, str) or not reasoning:
        return out
    if fmt is HARMONY:
        # gpt-oss's template refuses thinking beside content in a turn with calls.
        return out if out.get("tool_calls") and out["content"] else {**out, "thinking": reasoning}
    return {**out, "reasoning_content": reasoning}


def _call(call: Any, where: str) -> tuple[str, str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise RequestError(f"{where} must be {{'id': ..., 'type': 'function', 'function': {{'name': ..., "
                           "'arguments': '{...}'}}}.", where)
    arguments = function.get("arguments") or "{}"
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
    except (json.JSONDecodeError, RecursionError):
        raise RequestError(f"{where}.function.arguments is not JSON.", where) from None
    return str(call.get("id") or ""), function["name"], args


def _id(fmt: ToolFormat | SectionFormat, call_id: str) -> str:
    return short_id(call_id) if fmt.short_ids else call_id


def _merge_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive turns of one role as one (templates without a tool role demand alternation)."""
    merged: list[dict[str, Any]] = []
    for message in messages:
        if merged and merged[-1]["role"] == message["role"]:
            merged[-1] = {**merged[-1], "content": f"{merged[-1]['content']}\n\n{message['content']}"}
        else:
            merged.append(message)
    return merged
