"""JSON schemas from requests: which keywords a grammar enforces, bounds on hostile schemas, and GBNF.

llama-cpp-python's converter turns a schema into a grammar, but it silently skips what it cannot
express (numeric bounds, uniqueItems, most formats...). Accepting such a schema would promise
output the sampler does not guarantee, so every keyword is checked here first, mirroring which
branch of the converter a schema takes: what that branch enforces passes, anything else is a 400
that names the keyword.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from llama_cpp.llama_grammar import SchemaConverter

from ..errors import RequestError

# Words that describe and never constrain: safe to ignore anywhere.
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$schema", "$id", "$comment",
                         "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "strict"})
FORMATS = frozenset({"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"})
MAX_SCHEMA_BYTES = 64_000  # one schema as JSON
MAX_DEPTH = 24  # nested schemas
MAX_NODES = 2_000  # schemas within one schema
MAX_REPEAT = 256  # minItems/maxItems/minLength/maxLength and {n,m} in patterns: each unrolls in the grammar
MAX_GBNF_CHARS = 256 * 1024  # as much as the runtime takes


def check_schema(schema: Any, param: str) -> None:
    """Raise RequestError (naming `param` and the keyword) unless a grammar can enforce all of `schema`."""
    if not isinstance(schema, dict):
        raise RequestError(f"{param} must be a JSON schema object.", param)
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError, RecursionError):
        raise RequestError(f"{param} is not a JSON schema (it nests too deeply or holds non-JSON values).",
                           param) from None
    if size > MAX_SCHEMA_BYTES:
        raise RequestError(f"{param} is {size:,} bytes of JSON; send a schema under {MAX_SCHEMA_BYTES:,}.", param)
    nodes = [0]
    for defs in ("$defs", "definitions"):
        for name, sub in (schema.get(defs) or {}).items():
            _check(sub, f"{param}.{defs}.{name}", 1, nodes)
    _check(schema, param, 0, nodes)


def _refuse(where: str, keyword: str, why: str = "") -> None:
    raise RequestError(f"{where}: the JSON schema keyword '{keyword}' cannot be enforced by this server"
                       f"{why}; remove it (or check the value yourself after the answer).", where)


def _check(schema: Any, where: str, depth: int, nodes: list[int]) -> None:
    nodes[0] += 1
    if depth > MAX_DEPTH or nodes[0] > MAX_NODES:
        raise RequestError(f"{where}: the schema nests deeper than {MAX_DEPTH} levels or holds more than "
                           f"{MAX_NODES} sub-schemas; simplify it.", where)
    if schema is True or schema == {}:
        return
    if not isinstance(schema, dict):
        raise RequestError(f"{where} must be a JSON schema object.", where)
    words = set(schema) - ANNOTATIONS
    kind = schema.get("type")

    def only(*allowed: str) -> None:
        for word in sorted(words - set(allowed)):
            _refuse(where, word, f" together with {'/'.join(a for a in allowed if a in schema)}")

    def sub(value: Any, name: str) -> None:
        _check(value, f"{where}.{name}", depth + 1, nodes)

    if "$ref" in schema:
        only("$ref")
        if not str(schema["$ref"]).startswith("#/"):
            _refuse(where, "$ref", " (only references inside the schema, '#/...', are followed)")
    elif "oneOf" in schema:
        _refuse(where, "oneOf", " (exactly-one is not enforceable; anyOf is)")
    elif "anyOf" in schema:
        only("anyOf")
        for i, option in enumerate(_list(schema["anyOf"], where, "anyOf")):
            sub(option, f"anyOf.{i}")
    elif isinstance(kind, list):
        only("type")
    elif "const" in schema:
        only("const", "type")
    elif "enum" in schema:
        only("enum", "type")
        _list(schema["enum"], where, "enum")
    elif kind in (None, "object") and ("properties" in schema or schema.get("additionalProperties", True) is not True):
        only("type", "properties", "required", "additionalProperties")
        properties = schema.get("properties") or {}
        if not isinstance(properties, dict):
            raise RequestError(f"{where}.properties must be an object.", where)
        for name, value in properties.items():
            sub(value, f"properties.{name}")
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            sub(extra, "additionalProperties")
    elif kind in (None, "array") and ("items" in schema or "prefixItems" in schema):
        if "prefixItems" in schema:
            only("type", "prefixItems")
            for i, item in enumerate(_list(schema["prefixItems"], where, "prefixItems")):
                sub(item, f"prefixItems.{i}")
        else:
            only("type", "items", "minItems", "maxItems")
            _counts(schema, where, "minItems", "maxItems")
            sub(schema["items"], "items")
    elif kind in (None, "string") and "pattern" in schema:
        only("type", "pattern")
        _check_pattern(schema["pattern"], where)
    elif kind in (None, "string") and "format" in schema:
        only("type", "format")
        if schema["format"] not in FORMATS:
            _refuse(where, "format", f" for {schema['format']!r} (enforced: {', '.join(sorted(FORMATS))})")
    elif kind == "string":
        only("type", "minLength", "maxLength")
        _counts(schema, where, "minLength", "maxLength")
    elif kind in ("object", "array", "number", "integer", "boolean", "null"):
        only("type")
    elif kind is None:
        only()
    else:
        raise RequestError(f"{where}: type {kind!r} is not a JSON schema type.", where)


def _list(value: Any, where: str, keyword: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise RequestError(f"{where}.{keyword} must be a non-empty list.", where)
    return value


def _counts(schema: dict[str, Any], where: str, low: str, high: str) -> None:
    for word in (low, high):
        value = schema.get(word)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_REPEAT):
            raise RequestError(f"{where}.{word}={value!r}: use a whole number from 0 to {MAX_REPEAT}.", where)


_REPEAT = re.compile(r"\{(\d+)(?:,(\d*))?\}")


def _check_pattern(pattern: Any, where: str) -> None:
    if not isinstance(pattern, str) or len(pattern) > 1_000:
        raise RequestError(f"{where}.pattern must be a string of at most 1,000 characters.", where)
    if not (pattern.startswith("^") and pattern.endswith("$")):
        _refuse(where, "pattern", " unless it is anchored at both ends ('^...$')")
    for low, high in _REPEAT.findall(pattern):
        if int(low) > MAX_REPEAT or (high and int(high) > MAX_REPEAT):
            raise RequestError(f"{where}.pattern repeats up to {high or low} times; use at most {MAX_REPEAT}.", where)
    if re.search(r"\(\?[=!<]", pattern):
        _refuse(where, "pattern", " with lookarounds")


def converter() -> SchemaConverter:
    """A schema converter that never fetches a remote $ref."""
    return SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)


def to_gbnf(build: Callable[[SchemaConverter], str], what: str, param: str) -> str:
    """The GBNF text that `build` writes with one converter (it returns the root rule's body)."""
    conv = converter()
    try:
        root = build(conv)
        conv._add_rule("root", root)
        text = conv.format_grammar()
    except (AssertionError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise RequestError(f"{what} cannot be turned into a grammar ({exc}); simplify the schema.", param) from None
    if len(text) > MAX_GBNF_CHARS:
        raise RequestError(f"{what} makes a grammar of {len(text):,} characters; simplify the schema.", param)
    return text


def schema_gbnf(schema: dict[str, Any], param: str) -> str:
    """The GBNF for values of `schema` (checked first)."""
    check_schema(schema, param)

    def build(conv: SchemaConverter) -> str:
        return conv.visit(conv.resolve_refs(schema, "request"), "value")
    return to_gbnf(build, param, param)
