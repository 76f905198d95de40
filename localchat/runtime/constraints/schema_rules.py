"""The one list of how each JSON-schema keyword is enforced on generated JSON, and the string
formats the grammar writes. The README's table is made from it (`markdown_table`).

- grammar: sampling cannot leave it; nothing is left to check.
- grammar + check: the grammar keeps to it where it can express it (and narrows the rest); the
  finished value is then validated, and resampled from the failing point until it passes.
- check: validated on the finished value and resampled (a bounded number of times; then an error
  naming the keyword).
- refused: a 400 naming the keyword.
- annotation: says nothing about which values are valid.
"""

from __future__ import annotations

from dataclasses import dataclass

GRAMMAR, PARTLY, CHECK, REFUSED, ANNOTATION = "grammar", "grammar + check", "check", "refused", "annotation"
# A count the grammar unrolls into rules: a larger maximum is left to the check, a larger minimum
# (or a pattern's {n,m} beyond it) is refused, as no answer would reach it anyway.
MAX_REPEAT = 256


@dataclass(frozen=True, slots=True)
class Rule:
    how: str
    note: str = ""


KEYWORDS: dict[str, Rule] = {
    "type": Rule(GRAMMAR, "a list of types is one branch per type, each with the node's other keywords"),
    "enum": Rule(GRAMMAR, "values that break the node's other keywords are left out"),
    "const": Rule(GRAMMAR, "as enum"),
    "properties": Rule(GRAMMAR, "only the listed properties are written unless additionalProperties allows more"),
    "required": Rule(GRAMMAR, "a required name without a property schema takes additionalProperties' schema"),
    "additionalProperties": Rule(GRAMMAR),
    "patternProperties": Rule(PARTLY, "grammar: keys that match, when the object lists no properties"),
    "minProperties": Rule(PARTLY, "grammar: when the required properties settle it, or when only "
                                  "additional or pattern keys are written"),
    "maxProperties": Rule(PARTLY, f"as minProperties, up to {MAX_REPEAT}"),
    "propertyNames": Rule(CHECK),
    "dependentRequired": Rule(CHECK),
    "dependentSchemas": Rule(CHECK),
    "unevaluatedProperties": Rule(CHECK),
    "items": Rule(GRAMMAR, "a list (draft 7 tuples) as prefixItems"),
    "prefixItems": Rule(GRAMMAR),
    "additionalItems": Rule(GRAMMAR, "the tuple is written without extra items"),
    "unevaluatedItems": Rule(CHECK),
    "minItems": Rule(GRAMMAR, f"up to {MAX_REPEAT} (more is refused)"),
    "maxItems": Rule(PARTLY, f"grammar: up to {MAX_REPEAT}; check: more"),
    "uniqueItems": Rule(CHECK, "resampled from the first repeated item"),
    "contains": Rule(GRAMMAR, "one item is written under both items and contains"),
    "minContains": Rule(CHECK),
    "maxContains": Rule(CHECK),
    "minLength": Rule(PARTLY, f"grammar: up to {MAX_REPEAT} (more is refused); check: beside a pattern or format"),
    "maxLength": Rule(PARTLY, f"grammar: up to {MAX_REPEAT}; check: more, or beside a pattern or format"),
    "pattern": Rule(PARTLY, "grammar: the regex syntax GBNF can spell (classes, groups, |, ?, *, +, "
                            "{m,n}, \\d \\w \\s); lookarounds, backreferences and \\b: check"),
    "format": Rule(PARTLY, "see the formats below; unknown formats are annotations"),
    "minimum": Rule(PARTLY, "integers: grammar (digit-range rules); numbers: the grammar bounds the "
                            "integral part, the check the rest"),
    "maximum": Rule(PARTLY, "as minimum"),
    "exclusiveMinimum": Rule(PARTLY, "as minimum (draft 4's boolean form too)"),
    "exclusiveMaximum": Rule(PARTLY, "as minimum"),
    "multipleOf": Rule(PARTLY, "grammar for numbers when it is 1 or 10^-k (decimal places); otherwise "
                               "check, exact in decimal arithmetic"),
    "allOf": Rule(PARTLY, "merged into one schema first; what does not merge is checked"),
    "anyOf": Rule(GRAMMAR, "keywords beside it join every branch"),
    "oneOf": Rule(PARTLY, "grammar: as anyOf; check: that only one branch matches, unless the branches' "
                          "types or constants keep them apart"),
    "not": Rule(CHECK),
    "if": Rule(CHECK, "with then and else"),
    "then": Rule(CHECK),
    "else": Rule(CHECK),
    "$ref": Rule(GRAMMAR, "local references (#/...); a remote one is refused"),
    "$dynamicRef": Rule(REFUSED),
    "$recursiveRef": Rule(REFUSED),
}

# Keywords that hold other schemas or say nothing about validity.
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$schema", "$id", "$anchor",
                         "$dynamicAnchor", "$recursiveAnchor", "$comment", "$vocabulary", "deprecated",
                         "readOnly", "writeOnly", "$defs", "definitions", "contentEncoding",
                         "contentMediaType", "contentSchema", "discriminator", "nullable"})


@dataclass(frozen=True, slots=True)
class Format:
    """How a string format is written: a builtin rule of the converter, or an anchored pattern that
    every value it matches is valid for. `exact`: everything it writes is valid (else checked too)."""

    pattern: str | None  # None: the converter's own rule for this format
    exact: bool = True
    note: str = ""


# Each part bounded, so that a model unsure what to write still reaches the end of the value.
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_LABEL = "[a-z0-9]{1,20}([-][a-z0-9]{1,20})?"
_HOST = f"{_LABEL}([.]{_LABEL}){{0,3}}"
_URL = f"https?://{_HOST}(/[a-zA-Z0-9._~%+-]{{1,24}}){{0,4}}/?([?][a-zA-Z0-9._~%+=&-]{{1,32}})?"
_POINTER = "(/([a-zA-Z0-9._-]|~[01]){0,24}){0,6}"
FORMATS: dict[str, Format] = {
    "date": Format(None, exact=False, note="the calendar is checked: no 31 February"),
    "time": Format(None),
    "date-time": Format(None, exact=False, note="as date"),
    "uuid": Format(None),
    "email": Format("^[a-z0-9]{1,20}([._+-][a-z0-9]{1,20})?@" + _HOST + "[.][a-z]{2,6}$"),
    "idn-email": Format("^[a-z0-9]{1,20}([._+-][a-z0-9]{1,20})?@" + _HOST + "[.][a-z]{2,6}$"),
    "hostname": Format(f"^{_HOST}$"),
    "idn-hostname": Format(f"^{_HOST}$"),
    "ipv4": Format(f"^{_OCTET}([.]{_OCTET}){{3}}$"),
    "ipv6": Format("^[0-9a-f]{1,4}(:[0-9a-f]{1,4}){7}$", note="the full eight-group form"),
    "uri": Format(f"^{_URL}$", note="http(s) URLs"),
    "uri-reference": Format(f"^{_URL}$"),
    "iri": Format(f"^{_URL}$"),
    "iri-reference": Format(f"^{_URL}$"),
    "uri-template": Format(f"^{_URL}$"),
    "json-pointer": Format(f"^{_POINTER}$"),
    "relative-json-pointer": Format(f"^(0|[1-9][0-9]{{0,3}})({_POINTER}|#)$"),
    "duration": Format("^P([0-9]{1,4}D|[0-9]{1,4}W|T[0-9]{1,4}[HMS]|[0-9]{1,4}Y([0-9]{1,2}M)?)$"),
    "regex": Format("^[a-zA-Z0-9 _-]{0,40}$"),
}


def markdown_table() -> str:
    """The README's table of keywords and formats."""
    rows = ["| keyword | enforced by | how |", "| --- | --- | --- |"]
    rows += [f"| `{name}` | {rule.how} | {rule.note.replace('|', chr(92) + '|')} |".replace(" |  |", " | |")
             for name, rule in KEYWORDS.items()]
    exact = ", ".join(f"`{name}`" for name, f in FORMATS.items() if f.exact)
    checked = "; ".join(f"`{name}` ({f.note})" for name, f in FORMATS.items() if not f.exact)
    rows += ["", f"Formats written by the grammar: {exact}; by the grammar and checked: {checked}. "
                 "Annotations (`title`, `description`, `default`, `examples`, `$defs`...) and keywords "
                 "JSON Schema does not define are ignored, as validators ignore them."]
    return "\n".join(rows)


if __name__ == "__main__":  # the README's table: paste it between its schema-rules markers
    print(markdown_table())
