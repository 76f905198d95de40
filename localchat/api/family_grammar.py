"""Grammars that force a family's own call form once its trigger is written: the marker families
(tool_families.py: DeepSeek, Kimi K2 and K3, Mistral's [ARGS], Qwen3-Coder and GLM XML, DSML, Gemma 4),
gpt-oss's harmony recipient and Llama 4's pythonic list. JSON arguments follow each tool's schema (the
converter's rules); an XML family's parameters are its schema's properties in order, strings written bare,
other values as JSON. Gemma 4 writes its values its own way (strings between <|"|>, keys bare), nested
objects and lists too; Llama 4 writes `name(key=value)` with JSON values (which read as Python's).
"""

from __future__ import annotations

from typing import Any

from ..runtime.constraints.schema_grammar import Converter, gbnf_of
from .tool_families import GEMMA_QUOTE, SectionFormat
from .tool_formats import MAX_PARALLEL, tool_schema
from .tool_xml import XTML_ARGUMENT, XTML_ARGUMENT_END, XTML_SEP

HARMONY_TRIGGER = "to=functions."
MAX_BARE = 4096  # characters of an XML family's string value without a maxLength: the grammar must end


def _bare(prop: dict[str, Any]) -> str:
    """An XML family's string value, written bare: any text without a tag, as long as its schema allows."""
    low = int(prop.get("minLength") or 0)
    high = int(prop.get("maxLength") or MAX_BARE)
    return f"[^<]{{{min(low, high)},{min(high, MAX_BARE)}}}"


def _lit(conv: Converter, text: str) -> str:
    return conv._format_literal(text) if text else ""


def _args(conv: Converter, tool: dict[str, Any], i: int) -> str:
    return conv.visit(conv.resolve_refs(tool_schema(tool), f"tool{i}"), f"tool{i}-args")


def _members(parts: list[tuple[str, bool]], sep: str) -> str:
    """Members (rule, required) joined by `sep`: the required ones always, in order, then each optional one
    or not; with none required, any of them in order, or none."""
    required = [rule for rule, needed in parts if needed]
    optional = [rule for rule, needed in parts if not needed]
    if required:
        return f" {sep} ".join(required) + "".join(f" ({sep} {rule})?" for rule in optional)
    if not optional:
        return ""
    firsts = [" ".join([rule, *(f"({sep} {later})?" for later in optional[k + 1:])]) for k, rule in enumerate(optional)]
    return "(" + " | ".join(firsts) + ")?"


def _gemma_value(conv: Converter, schema: Any, name: str) -> str:
    """A value in Gemma 4's own writing: strings between <|"|>, objects with bare keys, lists of such; what
    JSON writes alike (numbers, booleans, null) by the converter's rules."""
    if not isinstance(schema, dict):
        return conv.visit({}, name)
    kind, quote = schema.get("type"), _lit(conv, GEMMA_QUOTE)
    choices = schema.get("anyOf") or schema.get("oneOf") or ([{**schema, "type": t} for t in kind]
                                                              if isinstance(kind, list) else None)
    if isinstance(choices, list) and choices:  # each choice in Gemma's writing (a JSON string would not read)
        return "(" + " | ".join(conv._add_rule(f"{name}-{k}", _gemma_value(conv, choice, f"{name}-{k}"))
                                for k, choice in enumerate(choices)) + ")"
    if isinstance(schema.get("const"), str):
        return _lit(conv, GEMMA_QUOTE + schema["const"] + GEMMA_QUOTE)
    if kind == "string" and "enum" not in schema:
        return f"{quote} {_bare(schema)} {quote}"
    if isinstance(schema.get("enum"), list) and all(isinstance(v, str) for v in schema["enum"]):
        return "(" + " | ".join(_lit(conv, GEMMA_QUOTE + v + GEMMA_QUOTE) for v in schema["enum"]) + ")"
    if kind == "array" and isinstance(schema.get("items", {}), dict):
        item = conv._add_rule(f"{name}-item", _gemma_value(conv, schema.get("items", {}), f"{name}-item"))
        return f'"[" ({item} ("," {item})*)? "]"'
    if kind == "object" and isinstance(schema.get("properties"), dict):
        return f'"{{" {_gemma_members(conv, schema, name) or chr(34) * 2} "}}"'
    return conv.visit(schema, name)


def _gemma_members(conv: Converter, schema: dict[str, Any], name: str) -> str:
    required = set(schema.get("required") or [])
    parts = [(f'{_lit(conv, f"{key}:")} {conv._add_rule(f"{name}-{j}", _gemma_value(conv, prop, f"{name}-{j}"))}',
              key in required) for j, (key, prop) in enumerate(schema["properties"].items())]
    return _members(parts, '","')


def _attribute(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;")  # as Kimi K3's template escapes attributes


XTML_TYPES = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null",
              "object": "object", "array": "array"}


def _xml_params(conv: Converter, tool: dict[str, Any], i: int, fmt: SectionFormat) -> str:
    """The parameters of one call in an XML family's form, the required ones always, the rest optional."""
    schema = conv.resolve_refs(tool_schema(tool), f"tool{i}")
    required = set(schema.get("required") or [])
    if fmt.name == "gemma4":
        return _gemma_members(conv, schema, f"tool{i}") if schema.get("properties") else ""
    parts = []
    for j, (key, prop) in enumerate((schema.get("properties") or {}).items()):
        kinds = prop.get("type") if isinstance(prop, dict) else None
        value = _bare(prop) if kinds == "string" else conv.visit(prop, f"tool{i}-p{j}")
        if fmt.name == "kimi-k3":
            if isinstance(prop, dict) and isinstance(prop.get("enum"), list) and \
                    all(isinstance(v, str) for v in prop["enum"]):  # its choices written bare, as strings
                kinds, value = "string", "(" + " | ".join(_lit(conv, v) for v in prop["enum"]) + ")"
            kind = XTML_TYPES.get(kinds, "object") if isinstance(kinds, str) else "object"
            head = f'{XTML_ARGUMENT} key="{_attribute(key)}" type="{kind}"{XTML_SEP}'
            one = f'{_lit(conv, head)} {value} {_lit(conv, XTML_ARGUMENT_END)}'
        elif fmt.name == "qwen3-xml":
            one = f'{_lit(conv, f"<parameter={key}>" + chr(10))} {value} {_lit(conv, chr(10) + "</parameter>" + chr(10))}'
        elif fmt.name == "glm":
            one = f'{_lit(conv, f"<arg_key>{key}</arg_key><arg_value>")} {value} {_lit(conv, "</arg_value>")}'
        else:  # DSML
            flag = "true" if kinds == "string" else "false"
            one = (f'{_lit(conv, f"<｜DSML｜parameter name={chr(34)}{key}{chr(34)} string={chr(34)}{flag}{chr(34)}>")}'
                   f' {value} {_lit(conv, "</｜DSML｜parameter>" + chr(10))}')
        parts.append(one if key in required else f"({one})?")
    return " ".join(parts) or '""'


def _xml_call(conv: Converter, tool: dict[str, Any], i: int, fmt: SectionFormat) -> str:
    name = tool["function"]["name"]
    params = _xml_params(conv, tool, i, fmt)
    if fmt.name == "qwen3-xml":
        return f'{_lit(conv, f"<tool_call>{chr(10)}<function={name}>{chr(10)}")} {params} ' \
               f'{_lit(conv, "</function>" + chr(10) + "</tool_call>")}'
    if fmt.name == "glm":
        return f'{_lit(conv, f"<tool_call>{name}")} {params} {_lit(conv, "</tool_call>")}'
    if fmt.name == "gemma4":
        return f'{_lit(conv, f"<|tool_call>call:{name}{{")} {params or chr(34) * 2} {_lit(conv, "}<tool_call|>")}'
    if fmt.name == "kimi-k3":
        return f'{_lit(conv, f"<|open|>call tool={chr(34)}{_attribute(name)}{chr(34)} index={chr(34)}1{chr(34)}{XTML_SEP}")}' \
               f' {params} {_lit(conv, fmt.closes[0])}'
    return f'{_lit(conv, f"<｜DSML｜invoke name={chr(34)}{name}{chr(34)}>{chr(10)}")} {params} ' \
           f'{_lit(conv, "</｜DSML｜invoke>" + chr(10))}'


def section_gbnf(fmt: SectionFormat, tools: list[dict[str, Any]], parallel: bool,
                 param: str = "tools") -> tuple[str, list[str]]:
    """A grammar for one (or, with `parallel`, several) calls of `tools` in `fmt`'s own form, from its
    trigger on, and what it leaves to the check."""

    def build(conv: Converter) -> str:
        alternatives = []
        for i, tool in enumerate(tools):
            name = tool["function"]["name"]
            if fmt.head is not None:
                opener = fmt.opens[0] if fmt.opens[0] != fmt.trigger or fmt.name == "mistral-args" else ""
                body = f'{_lit(conv, opener + fmt.head(name, 0))} {_args(conv, tool, i)} ' \
                       f'{_lit(conv, fmt.tail + (fmt.closes[0] if fmt.closes else ""))}'
            else:
                body = _xml_call(conv, tool, i, fmt)
            alternatives.append(conv._add_rule(f"tool{i}-call", body))
        call = conv._add_rule("call", " | ".join(alternatives))
        sep = '[ \\t\\n]*' if fmt.name in ("qwen3-xml", "glm") else ""
        more = f" ({sep} {call}){{0,{MAX_PARALLEL - 1}}}" if parallel else ""
        if fmt.name == "mistral-args":
            return f"{call}{more}"
        start = fmt.trigger if fmt.trigger != fmt.opens[0] else ""
        end = fmt.section[-1] if fmt.section and fmt.section[-1] != fmt.trigger else ""
        if fmt.name == "deepseek-dsml":
            start, end = fmt.trigger + "\n", fmt.closes[0]
        return " ".join(filter(None, (_lit(conv, start), f"{call}{more}", _lit(conv, end))))

    return gbnf_of(build, "the tools' parameter schemas", param)


def harmony_gbnf(tools: list[dict[str, Any]], required: bool = False, param: str = "tools") -> tuple[str, list[str]]:
    """gpt-oss's call from its recipient on: `to=functions.NAME`, the channel and `json`, the arguments. A
    call that is required opens its commentary message at once (the grammar holds from the first token)."""

    def build(conv: Converter) -> str:
        alternatives = []
        header = conv._add_rule("call-header", " | ".join(_lit(conv, h) for h in (
            " <|constrain|>json<|message|>", "<|channel|>commentary json<|message|>",
            "<|channel|>commentary <|constrain|>json<|message|>")))
        for i, tool in enumerate(tools):
            name = _lit(conv, HARMONY_TRIGGER + tool["function"]["name"])
            alternatives.append(conv._add_rule(f"tool{i}-call", f"{name} {header} {_args(conv, tool, i)}"))
        calls = " | ".join(alternatives)
        return f'{_lit(conv, "<|channel|>commentary ")} ({calls})' if required else calls

    return gbnf_of(build, "the tools' parameter schemas", param)


def pythonic_gbnf(tools: list[dict[str, Any]], parallel: bool, param: str = "tools") -> tuple[str, list[str]]:
    """Llama 4's list of calls, `[name(key=value, ...), ...]`, each value JSON (true, false and null read as
    Python's True, False and None)."""

    def build(conv: Converter) -> str:
        alternatives = []
        for i, tool in enumerate(tools):
            schema = conv.resolve_refs(tool_schema(tool), f"tool{i}")
            required = set(schema.get("required") or [])
            parts = [(f'{_lit(conv, key + "=")} {conv.visit(prop, f"tool{i}-p{j}")}', key in required)
                     for j, (key, prop) in enumerate((schema.get("properties") or {}).items())]
            body = f'{_lit(conv, tool["function"]["name"] + "(")} {_members(parts, chr(34) + ", " + chr(34))} ")"'
            alternatives.append(conv._add_rule(f"tool{i}-call", body))
        call = conv._add_rule("call", " | ".join(alternatives))
        more = f' ("," " " {call}){{0,{MAX_PARALLEL - 1}}}' if parallel else ""
        return f'"[" {call}{more} "]"'

    return gbnf_of(build, "the tools' parameter schemas", param)
