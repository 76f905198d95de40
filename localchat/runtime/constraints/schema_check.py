"""The finished answer's JSON checked against its schema with the `jsonschema` package, and where in
the text a failing value starts (so it can be resampled from there: resample.py).

The validator follows the schema's own `$schema` (2020-12 when it names none), checks string
formats (with checks of its own where jsonschema lacks the package for one), compares multipleOf
in decimal arithmetic (0.07 is a multiple of 0.01; in binary floating point it is not), and runs a
schema's regexes with a time limit: a pattern is request data, and one like (a+)+$ takes
exponential time on the wrong string.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import re
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any, Iterable

import jsonschema
import regex
from jsonschema import FormatChecker, ValidationError
from jsonschema.validators import extend
from jsonschema.validators import validator_for as _jsonschema_validator_for

from .schema_rules import FORMATS

REGEX_SECONDS = 0.1  # one regex match on one string
_decoder = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


@dataclass(frozen=True, slots=True)
class Violation:
    """What the check found wrong first: the keyword, where (a JSON path), what, and the offsets in
    the answer's text where resampling may start: the failing value first, then each value that
    holds it, out to the whole value."""

    keyword: str
    where: str
    message: str
    offsets: tuple[int, ...]


# -- the validator ------------------------------------------------------------------------------

def _search(pattern: str, text: str) -> bool:
    try:
        return regex.search(pattern, text, timeout=REGEX_SECONDS) is not None
    except TimeoutError:
        return False  # too slow to decide: the value is resampled, or refused when that runs out


def _pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, patterns, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _multiple_of(validator, step, instance, schema):
    if not validator.is_type(instance, "number"):
        return
    try:
        remainder = Decimal(repr(instance)) % Decimal(repr(step))
    except ArithmeticError:
        remainder = Decimal(1)
    if remainder != 0:
        yield ValidationError(f"{instance!r} is not a multiple of {step!r}")


def _hostname(value: object) -> bool:
    if not isinstance(value, str):
        return True
    labels = value.rstrip(".").split(".")
    return 0 < len(value) <= 253 and all(re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?", label)
                                          for label in labels)


def _date(value: object) -> bool:
    if not isinstance(value, str):
        return True
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        return False
    return re.fullmatch(r"\d{4}-\d{2}-\d{2}", value) is not None


def _date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    date, _, time = value.partition("T")
    if not _date(date) or not time:
        return False
    try:
        datetime.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return False
    return True


def _ip(version: int):
    def check(value: object) -> bool:
        if not isinstance(value, str):
            return True
        try:
            return ipaddress.ip_address(value).version == version
        except ValueError:
            return False
    return check


def _matches(pattern: str):
    return lambda value: not isinstance(value, str) or re.fullmatch(pattern.strip("^$"), value) is not None


# Where jsonschema has no check for a format in this install (a missing optional package), these
# stand in: a real check where the standard library has one, else the pattern the grammar writes.
_OWN_FORMATS = {"hostname": _hostname, "idn-hostname": _hostname, "date": _date, "date-time": _date_time,
                "ipv4": _ip(4), "ipv6": _ip(6)}


@lru_cache(maxsize=1)
def format_checker() -> FormatChecker:
    checker = FormatChecker()
    for name, spec in FORMATS.items():
        if name not in checker.checkers:
            check = _OWN_FORMATS.get(name) or (_matches(spec.pattern) if spec.pattern else None)
            if check is not None:
                checker.checks(name)(check)
    return checker


def _text(schema: Any) -> str:
    return json.dumps(schema, sort_keys=True)


def validator_for(schema: Any) -> Any:
    """A validator for `schema`, made once per distinct schema."""
    return _validator(_text(schema))


@lru_cache(maxsize=256)
def _validator(text: str) -> Any:
    schema = json.loads(text)
    cls = extend(_draft(schema), {"pattern": _pattern, "patternProperties": _pattern_properties,
                                  "multipleOf": _multiple_of})
    return cls(schema, format_checker=format_checker())


def _draft(schema: Any) -> Any:
    """The validator class of the draft `schema` names; naming none, 2020-12, or draft 7 for a schema
    only draft 7 reads (tuples as `items` lists, as many tools still write)."""
    if isinstance(schema, dict) and "$schema" in schema:
        return _jsonschema_validator_for(schema, default=jsonschema.Draft202012Validator)
    for cls in (jsonschema.Draft202012Validator, jsonschema.Draft7Validator):
        if cls(cls.META_SCHEMA).is_valid(schema):
            return cls
    return jsonschema.Draft202012Validator


def schema_problem(schema: Any) -> str | None:
    """Why `schema` is not a valid JSON schema (None: it is)."""
    base = _draft(schema)
    try:
        base.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        return f"{exc.message}" + (f" (at {where})" if where else "")
    return None


# -- where a value lies in the text -----------------------------------------------------------------

def _skip_space(text: str, i: int) -> int:
    return _SPACE.match(text, i).end()


def _end_of_value(text: str, i: int) -> int:
    return _decoder.raw_decode(text, i)[1]


def offsets_of(text: str, start: int, path: Iterable[Any]) -> list[int]:
    """Where the value at `path` (keys and indices) inside the JSON value at text[start] begins,
    and where each value holding it begins: outermost first."""
    i = _skip_space(text, start)
    found = [i]
    for step in path:
        if text[i] == "{":
            i = _skip_space(text, i + 1)
            while text[i] != "}":
                key, i = json.decoder.scanstring(text, i + 1)
                i = _skip_space(text, _skip_space(text, i) + 1)  # past ':'
                if key == step:
                    break
                i = _skip_space(text, _end_of_value(text, i))
                if text[i] == ",":
                    i = _skip_space(text, i + 1)
            else:
                raise KeyError(step)
        elif text[i] == "[" and isinstance(step, int):
            i = _skip_space(text, i + 1)
            for _ in range(step):
                i = _skip_space(text, _end_of_value(text, i))
                i = _skip_space(text, i + 1)  # past ','
        else:
            raise KeyError(step)
        found.append(i)
    return found


def _first_repeat(items: list[Any]) -> int | None:
    """The index of the first item equal to an earlier one (as uniqueItems compares: 1 == 1.0)."""
    seen: list[Any] = []
    for index, item in enumerate(items):
        if any(_same(item, earlier) for earlier in seen):
            return index
        seen.append(item)
    return None


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 1 equals 1.0, true does not equal 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) in (int, float) and type(b) in (int, float) and a == b or type(a) is type(b) and a == b


_OUTER = ("then", "else", "not", "dependentSchemas", "propertyNames", "contains", "if")


def violation_in(value: Any, schema: Any, text: str, start: int, base: str = "$") -> Violation | None:
    """The first (earliest in the text) way `value`, written at text[start], breaks `schema`."""
    best: tuple[int, Violation] | None = None
    for error in validator_for(schema).iter_errors(value):
        path = list(error.absolute_path)
        keyword = next((k for k in error.absolute_schema_path if k in _OUTER), error.validator)
        if error.validator == "uniqueItems" and isinstance(error.instance, list):
            repeat = _first_repeat(error.instance)
            path += [repeat] if repeat is not None else []
        try:
            offsets = offsets_of(text, start, path)
        except (KeyError, IndexError, ValueError):
            offsets = [_skip_space(text, start)]
        where = base + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
        found = Violation(str(keyword), where, error.message[:300], tuple(reversed(offsets)))
        if best is None or offsets[-1] < best[0]:
            best = (offsets[-1], found)
    return best[1] if best else None


@dataclass(frozen=True, slots=True)
class SchemaCheck:
    """The check of an answer: one JSON value (the whole answer), or tool calls.

    `heads`: for tool calls, the text the grammar writes right before a tool's arguments, by tool
    name; their schemas are `schemas[name]`. None: the answer is one value of `schemas[""]`.
    `after`: where the calls may start (the format's trigger). `hold`: the grammar leaves part of
    the schema to this check, so no text goes out before it passes. `param`: the request field
    the schemas came from, for errors. `thought`: a thinking model's closing marker; the text up to
    it is thinking, never checked."""

    schemas: dict[str, Any]
    hold: bool
    param: str
    heads: dict[str, str] | None = None
    after: str = ""
    thought: str = ""

    def __call__(self, text: str) -> Violation | None:
        closed = text.find(self.thought) if self.thought else -1
        answer = closed + len(self.thought) if closed >= 0 else 0
        if self.heads is None:
            return self._value(text, answer, self.schemas[""], "$")
        begin = max(text.find(self.after, answer), answer) if self.after else answer
        for name, head in self.heads.items():
            at = text.find(head, begin)
            while at >= 0:
                found = self._value(text, at + len(head), self.schemas[name], f"{name}")
                if found is not None:
                    return found
                at = text.find(head, at + len(head))
        return None

    def _value(self, text: str, start: int, schema: Any, base: str) -> Violation | None:
        at = _skip_space(text, start)
        try:
            value, _ = _decoder.raw_decode(text, at)
        except (json.JSONDecodeError, RecursionError):
            return Violation("json", base, "the answer is not JSON", (at,))
        return violation_in(value, schema, text, at, base)

