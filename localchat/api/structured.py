"""JSON schemas from requests: bounded, checked to be schemas, then GBNF and the check of the rest.

The runtime's converter (schema_grammar.py) writes what a grammar can enforce and names what it
leaves to the check, which the engine runs on the finished answer, resampling until it passes
(schema_rules.py lists which keyword goes where). The converter unrolls every count (maxItems:
10**9) into rules, so counts, depth and size are bounded here before it runs.
"""

from __future__ import annotations

import json
import re
from typing import Any

import regex

from ..errors import RequestError
from ..runtime.constraints.grammar import Grammar
from ..runtime.constraints.schema_check import schema_problem
from ..runtime.constraints.schema_grammar import grammar_from_json_schema
from ..runtime.constraints.schema_rules import MAX_REPEAT

MAX_SCHEMA_BYTES = 64_000  # one schema as JSON
MAX_DEPTH = 24  # nested schemas
MAX_NODES = 2_000  # objects and lists within one schema
_COUNTS = ("minItems", "minLength", "minProperties")  # unrolled in the grammar (a larger maximum is checked)
_MAXIMA = ("maxItems", "maxLength", "maxProperties")
_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")  # name -> schema
_DATA = ("enum", "const", "default", "examples")  # values, not schemas


def check_schema(schema: Any, param: str) -> None:
    """Raise RequestError (naming `param`) unless `schema` is a JSON schema within the bounds."""
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
    problem = schema_problem(schema)
    if problem:
        raise RequestError(f"{param} is not a valid JSON schema: {problem}.", param)


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
        for word in _MAXIMA:
            count = value.get(word)
            if count is not None and not (isinstance(count, int) and not isinstance(count, bool) and count >= 0):
                raise RequestError(f"{where}: {word}={count!r}; use a whole number from 0 up.", where)
        if "pattern" in value:
            _check_pattern(value["pattern"], where)
        if isinstance(value.get("patternProperties"), dict):
            for pattern in value["patternProperties"]:
                _check_pattern(pattern, f"{where}.patternProperties")
    for key, sub in value.items():
        if isinstance(sub, (dict, list)) and (names or key not in _DATA):
            _check_bounds(sub, f"{where}.{key}", depth + 1, nodes, not names and key in _MAPS)


_REPEAT = re.compile(r"\{(\d+)(?:,(\d*))?\}")


def _check_pattern(pattern: Any, where: str) -> None:
    if not isinstance(pattern, str) or len(pattern) > 1_000:
        raise RequestError(f"{where}.pattern must be a string of at most 1,000 characters.", where)
    for low, high in _REPEAT.findall(pattern):
        if int(low) > MAX_REPEAT or (high and int(high) > MAX_REPEAT):
            raise RequestError(f"{where}.pattern repeats up to {high or low} times; use at most {MAX_REPEAT}.", where)
    try:
        regex.compile(pattern)
    except regex.error as exc:
        raise RequestError(f"{where}.pattern is not a regular expression ({exc}).", where) from None


def schema_grammar(schema: dict[str, Any], param: str) -> Grammar:
    """The grammar for values of `schema` (checked first), with the check of what it leaves out."""
    check_schema(schema, param)
    return grammar_from_json_schema(schema, param=param)
