"""JSON schemas from requests: refused unless a grammar enforces them at a bounded cost; then GBNF.

llama-cpp-python's converter turns a schema into a grammar, but it silently skips what it cannot
express (numeric bounds, uniqueItems, most formats...); the runtime's `unsupported_keywords` says
which, and such a schema is a 400 naming the keyword. The converter also unrolls every count
(maxItems: 10**9) into rules, so counts, depth and size are bounded here before it runs.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from llama_cpp.llama_grammar import SchemaConverter

from ..errors import RequestError
from ..runtime.grammar import MAX_GBNF_CHARS, json_strings_only, unsupported_keywords

MAX_SCHEMA_BYTES = 64_000  # one schema as JSON
MAX_DEPTH = 24  # nested schemas
MAX_NODES = 2_000  # objects and lists within one schema
MAX_REPEAT = 256  # minItems/maxItems/minLength/maxLength and {n,m} in patterns: each unrolls in the grammar
_COUNTS = ("minItems", "maxItems", "minLength", "maxLength")
_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")  # name -> schema
_DATA = ("enum", "const", "default", "examples")  # values, not schemas


def check_schema(schema: Any, param: str) -> None:
    """Raise RequestError (naming `param` and the keyword) unless a grammar can enforce all of `schema`
    at a bounded cost."""
    if not isinstance(schema, dict):
        raise RequestError(f"{param} must be a JSON schema object.", param)
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError, RecursionError):
        raise RequestError(f"{param} is not a JSON schema (it nests too deeply or holds non-JSON values).",
                           param) from None
    if size > MAX_SCHEMA_BYTES:
        raise RequestError(f"{param} is {size:,} bytes of JSON; send a schema under {MAX_SCHEMA_BYTES:,}.", param)
    _check_bounds(schema, param, 0, [0])
    try:
        unenforced = unsupported_keywords(schema)
    except (AttributeError, KeyError, TypeError, ValueError):  # shapes the converter would crash on too
        raise RequestError(f"{param} is not a schema this server can read (an empty or malformed "
                           "sub-schema?); check it.", param) from None
    if unenforced:
        where, _, keyword = unenforced[0].partition(": ")
        raise RequestError(f"{param} ({where}): the JSON schema keyword '{keyword}' cannot be enforced by this "
                           "server; remove it (or check the value yourself after the answer).", param)


def _check_bounds(value: Any, where: str, depth: int, nodes: list[int], names: bool = False) -> None:
    """Depth, size and every count that the converter unrolls into grammar rules. `names`: `value` maps
    names to schemas (properties, $defs), so its keys are no keywords."""
    nodes[0] += 1
    if depth > MAX_DEPTH or nodes[0] > MAX_NODES:
        raise RequestError(f"{where}: the schema nests deeper than {MAX_DEPTH} levels or holds more than "
                           f"{MAX_NODES} parts; simplify it.", where)
    if isinstance(value, list):
        for item in value:
            _check_bounds(item, where, depth + 1, nodes)
        return
    if not isinstance(value, dict):
        return
    if not names:
        for word in _COUNTS:
            count = value.get(word)
            if count is not None and not (isinstance(count, int) and not isinstance(count, bool)
                                          and 0 <= count <= MAX_REPEAT):
                raise RequestError(f"{where}: {word}={count!r}; use a whole number from 0 to {MAX_REPEAT}.", where)
        if "pattern" in value:
            _check_pattern(value["pattern"], where)
    for key, sub in value.items():
        if isinstance(sub, (dict, list)) and (names or key not in _DATA):
            _check_bounds(sub, f"{where}.{key}", depth + 1, nodes, not names and key in _MAPS)


_REPEAT = re.compile(r"\{(\d+)(?:,(\d*))?\}")


def _check_pattern(pattern: Any, where: str) -> None:
    if not isinstance(pattern, str) or len(pattern) > 1_000:
        raise RequestError(f"{where}.pattern must be a string of at most 1,000 characters.", where)
    if not (pattern.startswith("^") and pattern.endswith("$")):
        raise RequestError(f"{where}: the JSON schema keyword 'pattern' is enforced only when anchored at both "
                           "ends ('^...$'); anchor it.", where)
    for low, high in _REPEAT.findall(pattern):
        if int(low) > MAX_REPEAT or (high and int(high) > MAX_REPEAT):
            raise RequestError(f"{where}.pattern repeats up to {high or low} times; use at most {MAX_REPEAT}.", where)
    if re.search(r"\(\?[=!<]", pattern):  # the converter would drop the condition silently
        raise RequestError(f"{where}: the JSON schema keyword 'pattern' is enforced only without lookarounds.",
                           where)


def converter() -> SchemaConverter:
    """A schema converter that never fetches a remote $ref."""
    return SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)


def to_gbnf(build: Callable[[SchemaConverter], str], what: str, param: str) -> str:
    """The GBNF text that `build` writes with one converter (it returns the root rule's body)."""
    conv = converter()
    try:
        root = build(conv)
        conv._add_rule("root", root)
        text = json_strings_only(conv.format_grammar())
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
