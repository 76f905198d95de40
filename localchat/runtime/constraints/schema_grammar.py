"""JSON schema to GBNF: llama-cpp-python's converter, extended where it ignores keywords.

Its converter enforces the structure (objects, arrays, enums, anyOf, $ref, string lengths) and
silently drops the rest. `Converter` adds integer bounds (digit-range rules), number bounds on the
integral part, decimal places from multipleOf, merged allOf, keywords beside anyOf/oneOf/$ref
spread into them, string formats and patterns in a syntax GBNF can spell, patternProperties,
minProperties/maxProperties and contains; and records every keyword its grammar does not fully
enforce (`left`), which the finished value is then checked against (schema_check.py). A grammar
may write fewer values than the schema allows (only listed properties, no exponents under
bounds), never more than the check lets through. schema_rules.py lists what is enforced how.
"""

from __future__ import annotations

import copy
import math
from decimal import Decimal, InvalidOperation
from typing import Any, Callable

from llama_cpp.llama_grammar import (
    INVALID_RULE_CHARS_RE,
    PRIMITIVE_RULES,
    STRING_FORMAT_RULES,
    SchemaConverter,
    _build_repetition,
)

from ...errors import RequestError
from .grammar import MAX_GBNF_CHARS, Grammar, json_strings_only
from .int_range import MAX_DIGITS, integer_bounds, integer_range
from .regex_subset import gbnf_pattern
from .schema_check import SchemaCheck
from .schema_merge import are_numbers, disjoint, intersection, json_in, keywords, without
from .schema_rules import FORMATS, KEYWORDS, MAX_REPEAT, REFUSED

OBJECT_KEYWORDS = frozenset({"properties", "required", "additionalProperties", "patternProperties", "minProperties",
                             "maxProperties", "propertyNames", "dependentRequired", "dependentSchemas",
                             "unevaluatedProperties"})
ARRAY_KEYWORDS = frozenset({"items", "prefixItems", "additionalItems", "unevaluatedItems", "minItems", "maxItems",
                            "uniqueItems", "contains", "minContains", "maxContains"})
STRING_KEYWORDS = frozenset({"minLength", "maxLength", "pattern", "format"})
NUMBER_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
_KIND_KEYWORDS = {"object": OBJECT_KEYWORDS, "array": ARRAY_KEYWORDS, "string": STRING_KEYWORDS,
                  "number": NUMBER_KEYWORDS, "integer": NUMBER_KEYWORDS, "boolean": frozenset(),
                  "null": frozenset()}
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


class RefusedKeyword(ValueError):
    """A keyword the server refuses (schema_rules.REFUSED)."""

    def __init__(self, keyword: str) -> None:
        super().__init__(keyword)
        self.keyword = keyword


class Converter(SchemaConverter):
    """The converter with the additions above; `left` names what its grammar leaves to the check."""

    def __init__(self) -> None:
        super().__init__(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
        self.left: list[str] = []  # "rule: keyword"
        self._inlined: set[str] = set()  # $refs whose targets are being merged with keywords beside them

    def resolve_refs(self, schema: Any, url: str) -> Any:
        """As the converter's, on a copy: it rewrites every $ref in place, and the check needs them as sent."""
        return super().resolve_refs(copy.deepcopy(schema), url)

    def _resolve_ref(self, ref: str) -> str:
        """As the converter's, but a recursive reference names its rule as the rule was written down
        (the converter returns the raw name, `linked_list_node` for `linked-list-node`)."""
        return INVALID_RULE_CHARS_RE.sub("-", super()._resolve_ref(ref))

    def _leave(self, name: str, keyword: str) -> None:
        self.left.append(f"{name or 'root'}: {keyword}")

    # -- dispatch ------------------------------------------------------------------------------

    def visit(self, schema: Any, name: str) -> str:
        rule_name = name + "-" if name in _RESERVED else name or "root"
        if schema is True or schema == {} or (isinstance(schema, dict) and not keywords(schema)):
            return self._add_rule(rule_name, self._add_primitive("value", PRIMITIVE_RULES["value"]))
        if schema is False:
            raise ValueError("a schema of `false` allows no value")
        if not isinstance(schema, dict):
            raise TypeError(f"a schema must be an object, not {type(schema).__name__}")
        keys = keywords(schema)
        for key in keys:
            if KEYWORDS[key].how == REFUSED:
                raise RefusedKeyword(key)
        if "allOf" in keys:
            merged, clean = intersection([without(schema, "allOf"), *schema["allOf"]], self._resolved)
            if not clean:
                self._leave(name, "allOf")
            return self.visit(merged, name)
        if "$ref" in keys:
            if keys == {"$ref"}:
                return super().visit(schema, name)
            ref = schema["$ref"]
            if ref in self._refs_being_resolved or ref in self._inlined:  # recursive: inline once at most
                for key in keys - {"$ref"}:
                    self._leave(name, key)
                return super().visit({"$ref": ref}, name)
            self._inlined.add(ref)  # keywords beside a $ref hold too: the target is merged with them
            try:
                merged, clean = intersection([self._refs[ref], without(schema, "$ref")], self._resolved)
                if not clean:
                    self._leave(name, "$ref")
                return self.visit(merged, name)
            finally:
                self._inlined.discard(ref)
        for key in ("anyOf", "oneOf"):
            if key in keys:
                return self._union(schema, key, name, rule_name)
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = list(dict.fromkeys(kind))
            branches = [{**schema, "type": k} for k in kinds]
            return self._add_rule(rule_name, self._generate_union_rule(name, branches))
        if "const" in keys or "enum" in keys:
            return self._add_rule(rule_name, self._constants(schema, name))
        if kind is None:
            kind = _implied_kind(keys)
        if kind is None:  # only keywords of no one type (not, if...): any value, checked
            for key in sorted(keys):
                self._leave(name, key)
            return self._add_rule(rule_name, self._add_primitive("value", PRIMITIVE_RULES["value"]))
        if kind not in _KIND_KEYWORDS:
            raise ValueError(f"unknown type {kind!r}")
        build = {"object": self._object, "array": self._array, "string": self._string, "integer": self._integer,
                 "number": self._number}.get(kind)
        if build is None:
            rule, done = self._primitive(kind, rule_name), set()
        else:
            rule, done = build(schema, name, rule_name)
        # Keywords of other types hold for any value of this one; the rest is left to the check.
        for key in sorted(keys - done - {"type"}):
            if key in _KIND_KEYWORDS[kind] or not any(key in words for words in _KIND_KEYWORDS.values()):
                self._leave(name, key)
        return rule

    def _union(self, schema: dict, key: str, name: str, rule_name: str) -> str:
        others = without(schema, key)
        branches = []
        for branch in schema[key]:
            merged, clean = intersection([others, branch], self._resolved) if keywords(others) else (branch, True)
            if not clean:
                self._leave(name, key)
            branches.append(merged)
        if key == "oneOf" and not disjoint(branches, self._resolved):
            self._leave(name, "oneOf")
        return self._add_rule(rule_name, self._generate_union_rule(name, branches))

    # -- kinds ---------------------------------------------------------------------------------

    def _constants(self, schema: dict, name: str) -> str:
        values = [schema["const"]] if "const" in schema else list(schema["enum"])
        if "const" in schema and "enum" in schema:
            values = [v for v in values if json_in(v, schema["enum"])]
        rest = {k: v for k, v in schema.items() if k not in ("const", "enum")}
        kept = values
        if keywords(rest) - {"type"} or "type" in rest:
            try:
                kept = [v for v in values if _valid(v, rest)]
            except Exception:  # a $ref or shape the check resolves in context: keep every value, check later
                self._leave(name, "enum" if "enum" in schema else "const")
        if not kept:
            raise ValueError("no value of its enum/const meets the schema's other keywords")
        return " | ".join(self._generate_constant_rule(v) for v in kept)

    def _object(self, schema: dict, name: str, rule_name: str) -> tuple[str, set[str]]:
        props = dict(schema.get("properties") or {})
        required = [r for r in schema.get("required") or [] if isinstance(r, str)]
        additional = schema.get("additionalProperties")
        if additional is None and schema.get("unevaluatedProperties") is False:
            additional = False
        done = {"properties", "required", "additionalProperties"}
        if schema.get("unevaluatedProperties") is False and additional is False:
            done.add("unevaluatedProperties")
        for missing in [r for r in required if r not in props]:
            if additional is False:
                raise ValueError(f"'{missing}' is required but not in properties, and additionalProperties is false")
            props[missing] = additional if isinstance(additional, dict) else {}
        low, high = schema.get("minProperties", 0), _unrolled(schema.get("maxProperties"))
        patterns = schema.get("patternProperties") or {}
        if not props and (patterns or (additional is not False and (low or high is not None))):
            kv = self._free_keys(patterns, additional, name)
            if kv is not None:
                body = _build_repetition(kv, low, high, separator_rule='"," space')
                done |= {"patternProperties", "minProperties"} | ({"maxProperties"} if high is not None else set())
                return self._add_rule(rule_name, f'"{{" space {body} "}}" space'), done
        if "properties" not in schema and additional in (None, True) and not patterns:
            if not low and high is None:
                done |= {"minProperties", "maxProperties"}
            return self._primitive("object", rule_name), done
        extra = additional if additional is True or isinstance(additional, dict) else None
        rule = self._build_object_rule(list(props.items()), set(required), name, extra)
        written = len(props) if extra is None else math.inf
        if low <= len(set(required)) and (high is None or written <= high):
            done |= {"minProperties", "maxProperties"}
        if not patterns:
            done.add("patternProperties")
        return self._add_rule(rule_name, rule), done

    def _free_keys(self, patterns: dict, additional: Any, name: str) -> str | None:
        """One key-value of an object without listed properties: a key matching one of `patterns`
        (then its value follows that pattern's schema), or else any key under `additional`."""
        alternatives = []
        for i, (pattern, sub) in enumerate(patterns.items()):
            rewritten = gbnf_pattern(pattern) if isinstance(pattern, str) else None
            if rewritten is None:
                return None
            key = self._visit_pattern(rewritten, f"{name}-key-{i}")
            alternatives.append(f'{key} ":" space {self.visit(sub, f"{name}-pattern-{i}")}')
        if not patterns:
            value = self.visit(additional if isinstance(additional, dict) else {}, f"{name}-additional-value")
            alternatives.append(f'{self._add_primitive("string", PRIMITIVE_RULES["string"])} ":" space {value}')
        return self._add_rule(f"{name}-kv", " | ".join(alternatives))

    def _array(self, schema: dict, name: str, rule_name: str) -> tuple[str, set[str]]:
        items = schema.get("items")
        prefix = schema.get("prefixItems") or (items if isinstance(items, list) else None)
        low, high = schema.get("minItems", 0), _unrolled(schema.get("maxItems"))
        done = {"items", "prefixItems", "minItems"} | ({"maxItems"} if high == schema.get("maxItems") else set())
        if prefix:
            if not (low <= len(prefix) and (high is None or len(prefix) <= high)):
                done -= {"minItems", "maxItems"}
            parts = [self.visit(item, f"{name}{'-' if name else ''}tuple-{i}") for i, item in enumerate(prefix)]
            done |= {"additionalItems"}
            return self._add_rule(rule_name, '"[" space ' + ' "," space '.join(parts) + ' "]" space'), done
        if items is False:
            high = 0
        item_schema = items if isinstance(items, dict) else {}
        item = self.visit(item_schema, f"{name}{'-' if name else ''}item")
        if high is not None and high <= 1:
            done.add("uniqueItems")
        contains = schema.get("contains")
        if contains is not None and low <= 1 and high is None:
            merged, clean = intersection([item_schema, contains], self._resolved) if isinstance(contains, dict) else (item_schema, True)
            if clean:
                hit = self.visit(merged, f"{name}{'-' if name else ''}contains")
                done.add("contains")
                body = f'({item} "," space)* {hit} ("," space {item})*'
                return self._add_rule(rule_name, f'"[" space {body} "]" space'), done
        body = _build_repetition(item, low, high, separator_rule='"," space')
        return self._add_rule(rule_name, f'"[" space {body} "]" space'), done

    def _string(self, schema: dict, name: str, rule_name: str) -> tuple[str, set[str]]:
        pattern, fmt = schema.get("pattern"), schema.get("format")
        if isinstance(pattern, str):
            rewritten = gbnf_pattern(pattern)
            if rewritten is not None:
                return self._visit_pattern(rewritten, rule_name), {"pattern"}
        if isinstance(fmt, str) and fmt in FORMATS and not isinstance(pattern, str):
            spec = FORMATS[fmt]
            done = {"format"} if spec.exact else set()
            if spec.pattern is not None:
                return self._visit_pattern(spec.pattern, rule_name), done
            if fmt == "uuid":
                return self._add_primitive("root" if rule_name == "root" else "uuid", PRIMITIVE_RULES["uuid"]), done
            rule = self._add_primitive(f"{fmt}-string", STRING_FORMAT_RULES[f"{fmt}-string"])
            return self._add_rule(rule_name, rule), done
        low, high = schema.get("minLength", 0), _unrolled(schema.get("maxLength"))
        done = {"minLength"} | ({"maxLength"} if high == schema.get("maxLength") else set())
        done |= {"format"} if fmt not in FORMATS else set()
        char = self._add_primitive("char", PRIMITIVE_RULES["char"])
        return self._add_rule(rule_name, r'"\"" ' + _build_repetition(char, low, high) + r' "\"" space'), done

    def _integer(self, schema: dict, name: str, rule_name: str) -> tuple[str, set[str]]:
        done = set(_BOUNDS) | ({"multipleOf"} if _decimal(schema.get("multipleOf")) == 1 else set())
        low, high = integer_bounds(schema)
        if low is None and high is None:
            return self._primitive("integer", rule_name), done
        return self._add_rule(rule_name, f"{integer_range(low, high)} space"), done

    def _number(self, schema: dict, name: str, rule_name: str) -> tuple[str, set[str]]:
        step = _decimal(schema.get("multipleOf"))
        if step == 1:
            return self._integer(schema, name, rule_name)  # multiples of 1 are integers, bounds and all
        places = -step.normalize().as_tuple().exponent if step is not None and _is_decimal_place(step) else None
        if places is None and not any(k in schema for k in _BOUNDS):
            return self._primitive("number", rule_name), set()
        # Bounds: the grammar keeps the integral part within them (no exponent); the check the rest.
        whole = integer_range(_truncated(schema, "minimum", "exclusiveMinimum"),
                              _truncated(schema, "maximum", "exclusiveMaximum"))
        digits = MAX_DIGITS - 1 if places is None else min(places, MAX_DIGITS - 1)
        rule = f'{whole} ("." [0-9]{{1,{digits}}})? space'
        return self._add_rule(rule_name, rule), ({"multipleOf"} if places is not None else set())

    def _primitive(self, kind: str, rule_name: str) -> str:
        """The converter's own rule for a type (named `root` at the top, as its visit does)."""
        return self._add_primitive("root" if rule_name == "root" else kind, PRIMITIVE_RULES[kind])

    # -- allOf and unions (schema_merge.py) -------------------------------------------------------

    def _resolved(self, schema: Any) -> Any:
        while isinstance(schema, dict) and keywords(schema) == {"$ref"} and schema["$ref"] in self._refs:
            schema = self._refs[schema["$ref"]]
        return schema


_RESERVED = {"root", "dot", *PRIMITIVE_RULES, *STRING_FORMAT_RULES}


def _unrolled(count: Any) -> int | None:
    """A maximum count as the grammar writes it: beyond MAX_REPEAT, none (the check keeps to it)."""
    return count if isinstance(count, int) and count <= MAX_REPEAT else None


def _implied_kind(keys: set[str]) -> str | None:
    for kind in ("object", "array", "string", "number"):
        if keys & _KIND_KEYWORDS[kind]:
            return kind
    return None


def _valid(value: Any, schema: dict) -> bool:
    from .schema_check import validator_for

    return validator_for(schema).is_valid(value)


def _decimal(value: Any) -> Decimal | None:
    if not are_numbers(value) or not math.isfinite(value) or value <= 0:
        return None
    try:
        return Decimal(str(value))
    except InvalidOperation:
        return None


def _is_decimal_place(step: Decimal) -> bool:
    """1, 0.1, 0.01...: a multiple of it is a number with that many decimal places at most."""
    digits = step.normalize().as_tuple()
    return digits.digits == (1,) and digits.exponent <= 0


def _truncated(schema: dict, inclusive: str, exclusive: str) -> int | None:
    """The integral part a number's bound allows (the rest of the bound is checked)."""
    values = [schema.get(inclusive)]
    flag = schema.get(exclusive)
    values.append(None if isinstance(flag, bool) else flag)
    numbers = [v for v in values if are_numbers(v) and math.isfinite(v) and abs(v) < 10 ** MAX_DIGITS]
    if not numbers:
        return None
    bound = max(numbers) if inclusive == "minimum" else min(numbers)
    return math.trunc(bound)


def gbnf_of(build: Callable[[Converter], str], what: str, param: str) -> tuple[str, list[str]]:
    """The GBNF text that `build` writes with one converter (it returns the root rule's body), and what
    the grammar leaves to the check; RequestError (naming `what` and `param`) when it cannot be made."""
    conv = Converter()
    try:
        conv._add_rule("root", build(conv))
        text = json_strings_only(conv.format_grammar())
    except RefusedKeyword as exc:
        raise RequestError(f"{what}: the JSON schema keyword '{exc.keyword}' is not supported by this server; "
                           "remove it.", param) from None
    except (AssertionError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise RequestError(f"{what} cannot be turned into a grammar ({exc or type(exc).__name__}); simplify the "
                           "schema (local $refs only, known types).", param) from None
    if len(text) > MAX_GBNF_CHARS:
        raise RequestError(f"{what} makes a grammar of {len(text):,} characters; simplify the schema.", param)
    return text, conv.left


def schema_gbnf_text(schema: Any, param: str = "response_format") -> tuple[str, list[str]]:
    """GBNF for values of `schema` (its `root` rule), and what it leaves to the check."""
    return gbnf_of(lambda conv: conv.visit(conv.resolve_refs(schema, "request"), "value"), param, param)


def grammar_from_json_schema(schema: dict[str, Any], triggers: tuple[str, ...] = (),
                             param: str = "response_format") -> Grammar:
    """A grammar for JSON text that validates against `schema`, with the check of what the grammar
    cannot express (resample.py); RequestError naming `param` when it cannot be."""
    gbnf, left = schema_gbnf_text(schema, param)
    return Grammar(gbnf, triggers, SchemaCheck({"": schema}, bool(left), param))
