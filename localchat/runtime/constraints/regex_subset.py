"""A JSON-schema `pattern` rewritten into the regex syntax llama-cpp-python's converter turns into
GBNF correctly, or None when it uses syntax a grammar cannot follow (then the check enforces it).

The converter takes anchored patterns of classes, groups, |, ?, *, + and {m,n}, and copies the rest
into GBNF as is: `\\d` or `\\.` would make a grammar llama.cpp refuses, and `.` or `[^a]` would let
a raw quote or control character into the JSON string. Everything written here matches only
characters a JSON string may hold unescaped, and only strings the original pattern matches: an
unanchored pattern (which needs only to occur somewhere) becomes one the whole string matches.
"""

from __future__ import annotations

# Characters a JSON string holds as themselves: no quote, no backslash, no control character.
_JSON_EXCLUDED = '"\\x5C\\x00-\\x1F\\x7F'
_ANY = f"[^{_JSON_EXCLUDED}]"
_CLASSES = {"d": "0-9", "w": "a-zA-Z0-9_", "s": "\\x20"}  # \s: a space (tabs and newlines need escapes)
_NEGATED = {"D": "0-9", "W": "a-zA-Z0-9_", "S": "\\x20"}
_QUANTIFIERS = "*+?"


def gbnf_pattern(pattern: str) -> str | None:
    """`pattern` as an anchored regex of the converter's subset, or None."""
    core = pattern
    if core.startswith("^"):
        core = core[1:]
    if core.endswith("$") and not core.endswith("\\$"):
        core = core[:-1]
    out: list[str] = []
    i, depth = 0, 0
    while i < len(core):
        c = core[i]
        if c == "\\":
            piece, i = _escape(core, i + 1, in_class=False)
            if piece is None:
                return None
            out.append(piece)
            continue
        if c == "[":
            piece, i = _class(core, i + 1)
            if piece is None:
                return None
            out.append(piece)
            continue
        if c == "(":
            if core.startswith("(?:", i):
                i += 3
            elif core.startswith("(?", i):
                return None  # lookarounds, named groups, flags
            else:
                i += 1
            depth += 1
            out.append("(")
            continue
        if c == ")":
            depth -= 1
            if depth < 0:
                return None
        elif c in _QUANTIFIERS and i + 1 < len(core) and core[i + 1] == "?":
            out.append(c)  # a lazy quantifier matches the same strings
            i += 2
            continue
        elif c in "^$":
            return None  # an anchor inside the pattern
        elif c == ".":
            out.append(_ANY)
            i += 1
            continue
        elif c == '"':
            return None  # written as \" inside the JSON string: the converter cannot say so
        elif ord(c) < 0x20:
            return None
        out.append(c)
        i += 1
    if depth != 0:
        return None
    return "^(" + "".join(out) + ")$"


def _escape(text: str, i: int, in_class: bool) -> tuple[str | None, int]:
    """What `\\X` at text[i] becomes: a class outside brackets, class content inside them."""
    if i >= len(text):
        return None, i
    c = text[i]
    if c in _CLASSES:
        return (_CLASSES[c] if in_class else f"[{_CLASSES[c]}]"), i + 1
    if c in _NEGATED:
        return (None if in_class else f"[^{_NEGATED[c]}{_JSON_EXCLUDED}]"), i + 1
    if c == "u" and i + 5 <= len(text) and all(h in "0123456789abcdefABCDEF" for h in text[i + 1:i + 5]):
        code = int(text[i + 1:i + 5], 16)
        if code < 0x20 or code in (0x22, 0x5C, 0x7F) or 0xD800 <= code < 0xE000:
            return None, i + 5
        return (f"\\u{code:04X}" if in_class else f"[\\u{code:04X}]"), i + 5
    if c.isalnum() or c in '"\\':
        return None, i + 1  # \b, \1, \n, \t..., or a quote/backslash the JSON string must escape
    hexed = f"\\x{ord(c):02X}"
    return (hexed if in_class else f"[{hexed}]"), i + 1


def _class(text: str, i: int) -> tuple[str | None, int]:
    """A bracket expression starting after its `[`: its GBNF form, and where it ends. A range that
    spans a quote or a backslash is split around them: raw in a JSON string, they would end or
    escape it."""
    negated = text.startswith("^", i)
    i += negated
    ranges: list[tuple[int, int]] = []
    extra: list[str] = []  # \\d and friends, already class content
    while i < len(text) and (text[i] != "]" or not (ranges or extra)):
        c = text[i]
        if c == "\\":
            if i + 1 < len(text) and text[i + 1] in _CLASSES:
                extra.append(_CLASSES[text[i + 1]])
                i += 2
                continue
            piece, i = _escape(text, i + 1, in_class=True)
            if piece is None:
                return None, i
            code = int(piece[2:], 16)
        elif c == "[" or ord(c) < 0x20:
            return None, i  # POSIX classes and nested sets; a raw control character
        else:
            code, i = ord(c), i + 1
        if i + 1 < len(text) and text[i] == "-" and text[i + 1] != "]":
            high, i = _class_char(text, i + 1)
            if high is None or high < code:
                return None, i
            ranges.append((code, high))
        else:
            ranges.append((code, code))
    if i >= len(text):
        return None, i
    kept = [piece for low, high in ranges for piece in _without_excluded(low, high)]
    content = "".join(_range_text(low, high) for low, high in kept) + "".join(extra)
    if negated:
        return f"[^{content}{_JSON_EXCLUDED}]", i + 1
    return (f"[{content}]" if content else None), i + 1


def _class_char(text: str, i: int) -> tuple[int | None, int]:
    """One character of a bracket expression (a range's end)."""
    if text[i] == "\\":
        piece, i = _escape(text, i + 1, in_class=True)
        return (int(piece[2:], 16) if piece and piece[1] in "xu" else None), i
    return ord(text[i]), i + 1


_EXCLUDED_CODES = sorted({*range(0x20), 0x22, 0x5C, 0x7F})


def _without_excluded(low: int, high: int) -> list[tuple[int, int]]:
    pieces, start = [], low
    for code in _EXCLUDED_CODES:
        if start <= code <= high:
            if start < code:
                pieces.append((start, code - 1))
            start = code + 1
    if start <= high:
        pieces.append((start, high))
    return pieces


def _range_text(low: int, high: int) -> str:
    one = lambda code: f"\\x{code:02X}" if code < 0x100 else f"\\u{code:04X}"  # noqa: E731
    return one(low) if low == high else f"{one(low)}-{one(high)}"
