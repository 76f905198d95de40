"""allOf and unions in a JSON schema: parts merged into one schema that every value of all of them meets,
and whether a union's branches can overlap (a oneOf the grammar may write as an anyOf). schema_grammar.py
turns the results into GBNF; where a merge is not exact, the finished value is checked (schema_check.py)."""

from __future__ import annotations

import json
from typing import Any, Callable

from .schema_rules import ANNOTATIONS, KEYWORDS

Resolve = Callable[[Any], Any]  # a schema with its $ref followed to what it names


def intersection(parts: list[Any], resolve: Resolve) -> tuple[dict, bool]:
    """One schema that every value of all `parts` meets; clean: exactly their intersection."""
    out: dict[str, Any] = {}
    clean = True
    for part in parts:
        part = resolve(part)
        if part is True or part == {}:
            continue
        if not isinstance(part, dict):
            raise ValueError("allOf holds a schema that is not an object")
        if "allOf" in part:
            part, inner = intersection([without(part, "allOf"), *part["allOf"]], resolve)
            clean &= inner
        for key, value in part.items():
            if key not in out:
                out[key] = value
            elif out[key] == value or key in ANNOTATIONS or key not in KEYWORDS:
                continue
            else:
                out[key], ok = _merged_keyword(key, out[key], value, resolve)
                clean &= ok
    if "additionalProperties" in out and len({json.dumps(sorted((resolve(p) or {}).get("properties", {})))
                                              for p in parts if isinstance(resolve(p), dict)}) > 1:
        clean = False  # each part's additionalProperties counts against its own properties only
    return out, clean

def _merged_keyword(key: str, a: Any, b: Any, resolve: Resolve) -> tuple[Any, bool]:
    if key == "properties":
        props = dict(a)
        ok = True
        for prop, sub in b.items():
            if prop in props:
                props[prop], inner = intersection([props[prop], sub], resolve)
                ok &= inner
            else:
                props[prop] = sub
        return props, ok
    if key == "required":
        return list(dict.fromkeys([*a, *b])), True
    if key in ("minimum", "minLength", "minItems", "minProperties", "minContains") and are_numbers(a, b):
        return max(a, b), True
    if key in ("maximum", "maxLength", "maxItems", "maxProperties", "maxContains") and are_numbers(a, b):
        return min(a, b), True
    if key in ("exclusiveMinimum", "exclusiveMaximum") and are_numbers(a, b):
        return (max if key == "exclusiveMinimum" else min)(a, b), True
    if key == "type":
        left, right = set(a if isinstance(a, list) else [a]), set(b if isinstance(b, list) else [b])
        both = left & right | ({"integer"} if ("number" in left and "integer" in right) or
                               ("integer" in left and "number" in right) else set())
        if not both:
            raise ValueError(f"allOf asks for types {sorted(left)} and {sorted(right)} at once: no value is both")
        both = sorted(both)
        return (both[0] if len(both) == 1 else both), True
    if key == "enum":
        return [v for v in a if json_in(v, b)], True
    if key == "uniqueItems":
        return bool(a or b), True
    if key in ("items", "additionalProperties") and isinstance(a, dict) and isinstance(b, dict):
        return intersection([a, b], resolve)
    return a, False

def disjoint(branches: list[Any], resolve: Resolve) -> bool:
    """No value can match two of `branches`: their types differ, or a required constant does."""
    resolved = [resolve(b) for b in branches]
    if not all(isinstance(b, dict) for b in resolved):
        return False
    kinds = [b.get("type") for b in resolved]
    if all(isinstance(k, str) for k in kinds):
        families = ["number" if k == "integer" else k for k in kinds]
        if len(set(families)) == len(families):
            return True
    consts = [json.dumps(b["const"], sort_keys=True) if "const" in b else None for b in resolved]
    if None not in consts and len(set(consts)) == len(consts):
        return True
    common = set.intersection(*(set((b.get("properties") or {})) & set(b.get("required") or []) for b in resolved))
    for prop in sorted(common):
        tags = []
        for b in resolved:
            sub = resolve(b["properties"][prop])
            values = [sub["const"]] if isinstance(sub, dict) and "const" in sub else (
                sub.get("enum") if isinstance(sub, dict) and isinstance(sub.get("enum"), list) else None)
            if values is None:
                break
            tags.append({json.dumps(v, sort_keys=True) for v in values})
        else:
            if sum(map(len, tags)) == len(set().union(*tags)):
                return True
    return False


def keywords(schema: dict) -> set[str]:
    """The keys of `schema` that say which values are valid."""
    return {k for k in schema if k in KEYWORDS and k not in ANNOTATIONS}


def without(schema: dict, key: str) -> dict:
    return {k: v for k, v in schema.items() if k != key}


def are_numbers(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def json_in(value: Any, values: list[Any]) -> bool:
    text = json.dumps(value, sort_keys=True)
    return any(json.dumps(v, sort_keys=True) == text for v in values)
