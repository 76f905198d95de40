"""JSON schema to grammar without a model: the README's table is the code's list, each keyword goes
where the list says, integer ranges are exact, rewritten patterns match only what the original
matches, and failing values are found where they start in the text."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from localchat.api.structured import check_schema, schema_grammar
from localchat.errors import RequestError
from localchat.runtime.constraints.int_range import integer_bounds, integer_range
from localchat.runtime.constraints.regex_subset import gbnf_pattern
from localchat.runtime.constraints.schema_check import SchemaCheck, offsets_of
from localchat.runtime.constraints.schema_grammar import schema_gbnf_text
from localchat.runtime.constraints.schema_rules import (
    ANNOTATIONS,
    CHECK,
    GRAMMAR,
    KEYWORDS,
    PARTLY,
    REFUSED,
    markdown_table,
)

ROOT = Path(__file__).resolve().parents[1]
CORPUS = json.loads((ROOT / "tests/data/schema_corpus.json").read_text())


def test_the_readme_table_is_the_list_in_the_code():
    readme = (ROOT / "README.md").read_text()
    table = readme.split("<!-- schema-rules:begin -->\n")[1].split("<!-- schema-rules:end -->")[0]
    assert table.strip() == markdown_table().strip(), \
        "the README's table is out of date: paste `python -m localchat.runtime.constraints.schema_rules` between its markers"


# For each keyword, a schema where the grammar enforces it whole (None: there is none) and one where
# it is left to the check (None: never), as the list says.
EXAMPLES = {
    "type": ({"type": ["integer", "null"]}, None),
    "enum": ({"type": "string", "enum": ["a", 1]}, None),
    "const": ({"const": {"a": [1]}}, None),
    "properties": ({"properties": {"a": {"type": "string"}}}, None),
    "required": ({"properties": {"a": {}}, "required": ["a", "b"]}, None),
    "additionalProperties": ({"type": "object", "additionalProperties": {"type": "integer"}}, None),
    "patternProperties": ({"patternProperties": {"^x-[a-z]+$": {"type": "string"}}},
                          {"properties": {"a": {}}, "patternProperties": {"^b$": {"type": "integer"}}}),
    "minProperties": ({"additionalProperties": {"type": "boolean"}, "minProperties": 2},
                      {"properties": {"a": {}, "b": {}}, "minProperties": 1}),
    "maxProperties": ({"properties": {"a": {}}, "maxProperties": 1},
                      {"properties": {"a": {}, "b": {}}, "maxProperties": 1}),
    "propertyNames": (None, {"type": "object", "propertyNames": {"maxLength": 3}}),
    "dependentRequired": (None, {"properties": {"a": {}, "b": {}}, "dependentRequired": {"a": ["b"]}}),
    "dependentSchemas": (None, {"properties": {"a": {}}, "dependentSchemas": {"a": {"required": ["b"]}}}),
    "unevaluatedProperties": (None, {"type": "object", "additionalProperties": True, "unevaluatedProperties": {}}),
    "items": ({"items": {"type": "integer"}}, None),
    "prefixItems": ({"prefixItems": [{"type": "integer"}, {"type": "string"}]}, None),
    "additionalItems": ({"$schema": "http://json-schema.org/draft-07/schema#", "items": [{"type": "integer"}],
                         "additionalItems": {"type": "string"}}, None),
    "unevaluatedItems": (None, {"type": "array", "unevaluatedItems": {"type": "integer"}}),
    "minItems": ({"items": {}, "minItems": 2}, None),
    "maxItems": ({"items": {}, "maxItems": 2}, {"items": {}, "maxItems": 300}),
    "uniqueItems": (None, {"items": {}, "uniqueItems": True}),
    "contains": ({"items": {"type": "integer"}, "contains": {"minimum": 5}}, None),
    "minContains": (None, {"contains": {"type": "integer"}, "minContains": 2}),
    "maxContains": (None, {"contains": {"type": "integer"}, "maxContains": 2}),
    "minLength": ({"type": "string", "minLength": 2}, {"type": "string", "pattern": "^a+$", "minLength": 2}),
    "maxLength": ({"type": "string", "maxLength": 2}, {"type": "string", "maxLength": 2083}),
    "pattern": ({"type": "string", "pattern": "^\\d{3}-[a-f]+\\.(x|y)$"}, {"type": "string", "pattern": "^(?!a)b$"}),
    "format": ({"type": "string", "format": "ipv4"}, {"type": "string", "format": "date"}),
    "minimum": ({"type": "integer", "minimum": 3}, {"type": "number", "minimum": 0.5}),
    "maximum": ({"type": "integer", "maximum": -3}, {"type": "number", "maximum": 0.5}),
    "exclusiveMinimum": ({"type": "integer", "exclusiveMinimum": 3}, {"type": "number", "exclusiveMinimum": 0}),
    "exclusiveMaximum": ({"type": "integer", "exclusiveMaximum": 3}, {"type": "number", "exclusiveMaximum": 1}),
    "multipleOf": ({"type": "number", "multipleOf": 0.01}, {"type": "integer", "multipleOf": 3}),
    "allOf": ({"allOf": [{"properties": {"a": {"type": "integer", "minimum": 1}}}, {"required": ["a"]}]},
              {"allOf": [{"type": "string", "pattern": "^a"}, {"pattern": "b$"}]}),
    "anyOf": ({"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]}, None),
    "oneOf": ({"oneOf": [{"type": "string"}, {"type": "integer"}]},
              {"oneOf": [{"type": "integer"}, {"type": "integer", "minimum": 3}]}),
    "not": (None, {"type": "string", "not": {"const": "x"}}),
    "if": (None, {"if": {"type": "string"}, "then": {"maxLength": 3}}),
    "then": (None, {"if": {"type": "string"}, "then": {"maxLength": 3}}),
    "else": (None, {"if": {"type": "string"}, "else": {"type": "integer"}}),
    "$ref": ({"$defs": {"a": {"type": "integer"}}, "$ref": "#/$defs/a"}, None),
}


def left_keywords(schema: dict) -> set[str]:
    return {entry.rpartition(": ")[2] for entry in schema_gbnf_text(schema)[1]}


@pytest.mark.parametrize("keyword", sorted(KEYWORDS))
def test_each_keyword_is_enforced_as_the_list_says(keyword: str):
    how = KEYWORDS[keyword].how
    if how == REFUSED:
        with pytest.raises(RequestError, match=re.escape(f"'{keyword}'")):
            schema_grammar({keyword: "#/x"}, "s")
        return
    whole, checked = EXAMPLES[keyword]
    assert (whole is not None) == (how in (GRAMMAR, PARTLY)) and (checked is not None) == (how in (PARTLY, CHECK))
    if whole is not None:
        assert keyword not in left_keywords(whole)
        assert not schema_grammar(whole, "s").check.hold
    if checked is not None:
        assert keyword in left_keywords(checked) or keyword in ("then", "else") and "if" in left_keywords(checked)
        assert schema_grammar(checked, "s").check.hold


def test_the_corpus_uses_only_listed_keywords():
    def keys(node, names=False):
        if isinstance(node, dict):
            for key, value in node.items():
                if not names:
                    yield key
                if key not in ANNOTATIONS - {"$defs", "definitions"} and key not in ("enum", "const"):
                    yield from keys(value, not names and key in ("properties", "$defs", "definitions",
                                                                 "patternProperties"))
        elif isinstance(node, list):
            for item in node:
                yield from keys(item)
    used = {k for entry in CORPUS for k in keys(entry["schema"])}
    assert used <= set(KEYWORDS) | ANNOTATIONS, used - set(KEYWORDS) - ANNOTATIONS
    assert len(CORPUS) >= 40


def _regex(gbnf: str) -> re.Pattern:
    """A digit-range GBNF expression as a Python regex (literals, classes, groups and counts only)."""
    return re.compile(re.sub(r'"([^"]*)"', lambda m: re.escape(m.group(1)), gbnf).replace(" ", ""))


@pytest.mark.parametrize("low, high", [(1, 9), (0, None), (None, 0), (-5, 5), (-100, -3), (12, 4567), (0, 0),
                                       (99, 1000), (None, -1000), (-17, None), (909, 9999), (None, None)])
def test_integer_ranges_are_exact(low, high):
    pattern = _regex(integer_range(low, high))
    for n in range(-11_000, 11_000):
        assert bool(pattern.fullmatch(str(n))) == ((low is None or n >= low) and (high is None or n <= high)), n
    assert not any(pattern.fullmatch(text) for text in ("-0", "00", "01", "-01", "1.0", "+1"))
    assert pattern.fullmatch("9" * 16) is not None or high is not None and high < 10**16 - 1


def test_random_integer_ranges_are_exact():
    rng = random.Random(7)
    for _ in range(200):
        low = rng.randint(-3000, 3000)
        high = rng.randint(low, 3000)
        pattern = _regex(integer_range(low, high))
        assert all(bool(pattern.fullmatch(str(n))) == (low <= n <= high) for n in range(-3500, 3500))


def test_integer_bounds_read_every_form():
    assert integer_bounds({"minimum": 0.5, "exclusiveMaximum": 10}) == (1, 9)
    assert integer_bounds({"exclusiveMinimum": 0}) == (1, None)
    assert integer_bounds({"minimum": 3, "exclusiveMinimum": True}) == (4, None)  # draft 4
    assert integer_bounds({"maximum": 1e300}) == (None, None)  # past any 16-digit integer
    with pytest.raises(RequestError, match="grammar"):
        schema_grammar({"type": "integer", "minimum": 5, "maximum": 4}, "s")


@pytest.mark.parametrize("pattern, inside, outside", [
    ("^\\d{3}-[A-Z]{2}$", ["123-AB"], ["12-AB", "123-ab", "123-AB "]),
    ("[0-9]{5}(-[0-9]{4})?", ["12345", "12345-6789"], ["1234"]),  # unanchored: the whole string matches
    ("^[^a]+$", ["bcd", "x y"], ["a", 'b"', "b\\", "b\n"]),  # never a quote, backslash or control character
    ("^(?:ab|cd)+?$", ["abcd"], ["ab c"]),
    ("^[ -~]+$", ["hi there"], ['a"b', "a\\b"]),  # a range over the quote is split around it
    ("^a\\.b\\-c$", ["a.b-c"], ["aXb-c"]),
])
def test_patterns_are_rewritten_into_what_gbnf_spells(pattern, inside, outside):
    rewritten = gbnf_pattern(pattern)
    assert rewritten is not None
    for text in inside:
        assert re.fullmatch(rewritten, text) and re.search(pattern, text), text
    for text in outside:
        assert not re.fullmatch(rewritten, text), text


@pytest.mark.parametrize("pattern", ["^(?=a)a$", "^a\\b$", "^(a)\\1$", "^a$|^b$", '^"$', "^a\\nb$"])
def test_patterns_a_grammar_cannot_follow_are_left_to_the_check(pattern):
    assert gbnf_pattern(pattern) is None
    assert "pattern" in left_keywords({"type": "string", "pattern": pattern})


def test_a_failing_value_is_found_where_it_starts():
    text = ' { "a" : [ 1 , {"b": 2} ], "c": [3, 3] }'
    assert [text[i] for i in offsets_of(text, 0, ["a", 1, "b"])] == ["{", "[", "{", "2"]
    check = SchemaCheck({"": {"properties": {"c": {"uniqueItems": True}, "a": {"items": {"type": "integer"}}}}},
                        True, "s")
    first = check(text)  # two errors: the earlier one in the text is resampled first
    assert first.keyword == "type" and first.where == "$.a[1]" and text[first.offsets[0]] == "{"
    later = check(' { "a": [1], "c": [3, 4, 3] }')
    assert later.keyword == "uniqueItems" and later.where == "$.c[2]"  # from the first repeated item


def test_tool_calls_are_checked_after_the_trigger_only():
    schema = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}}
    check = SchemaCheck({"f": schema}, True, "tools", {"f": '{"name": "f", "arguments": '}, "<tool_call>")
    early = 'I would call {"name": "f", "arguments": {"n": 4}} but '
    assert check(early + '<tool_call>\n{"name": "f", "arguments": {"n": 6}}\n</tool_call>') is None
    found = check('<tool_call>\n{"name": "f", "arguments": {"n": 6}}\n</tool_call>\n'
                  '<tool_call>\n{"name": "f", "arguments": {"n": 7}}\n</tool_call>')
    assert found.keyword == "multipleOf" and found.where == "f.n"


def test_multiple_of_is_decimal_and_regexes_are_bounded():
    check = SchemaCheck({"": {"type": "number", "multipleOf": 0.01}}, True, "s")
    assert check("19.99") is None and check("0.07") is None  # jsonschema's float division says otherwise
    assert check("0.075").keyword == "multipleOf"
    slow = SchemaCheck({"": {"type": "string", "pattern": "^(a|aa)+$"}}, True, "s")
    assert slow('"' + "a" * 5000 + 'b"') is not None  # answered (within the time limit), not hung


def test_only_invalid_or_unsupported_schemas_are_refused():
    for schema, why in [({"type": "integer", "minimum": "1"}, "not a valid JSON schema"),
                        ({"$dynamicRef": "#x"}, "'\\$dynamicRef'"),
                        ({"$ref": "https://example.com/s.json"}, "grammar"),
                        ({"type": "string", "pattern": "^(unclosed$"}, "not a regular expression"),
                        ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "no value is both")]:
        with pytest.raises(RequestError, match=why):
            schema_grammar(schema, "s")
    for entry in CORPUS:
        check_schema(entry["schema"], "s")
        schema_grammar(entry["schema"], "s")
