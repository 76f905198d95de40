"""JSON read from text nobody vouches for: a model's tool calls and a request's body.

Python's parser stops at about a thousand levels (RecursionError) and at an integer of more than 4,300
digits (a ValueError that is no JSONDecodeError), and a value that parses a little under the first limit
fails again wherever it is written out or validated. Read here, every such text is one JSONUnreadable that
says what is wrong, and a value that parses nests at most MAX_DEPTH levels, so it can go anywhere after.
"""

from __future__ import annotations

import json
import sys
from typing import Any

MAX_DEPTH = 128  # far beyond any tool's arguments or request body (a schema keeps to 24 levels)


class JSONUnreadable(ValueError):
    """Text that is not JSON within the bounds; its message completes "the text ..."."""


def json_value(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value `text` holds, or JSONUnreadable (never a RecursionError or a bare ValueError)."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise JSONUnreadable(f"is not valid JSON ({exc})") from None
    except RecursionError:
        raise JSONUnreadable(f"nests deeper than {max_depth} levels") from None
    except ValueError:  # int(): "Exceeds the limit (4300 digits) for integer string conversion"
        raise JSONUnreadable(f"holds an integer of more than {sys.get_int_max_str_digits():,} digits") from None
    brackets = (b"[", b"{") if isinstance(text, bytes) else ("[", "{")
    opened = text.count(brackets[0]) + text.count(brackets[1])
    if type(value) in (dict, list) and opened > max_depth and _deeper_than(value, max_depth):
        raise JSONUnreadable(f"nests deeper than {max_depth} levels")
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` nests more than `limit` arrays and objects: one level at a time, without recursion
    (about as long as the parse took, for a body of half a million small objects)."""
    level, depth = [value], 1
    while level:
        if depth > limit:
            return True
        deeper = []
        for item in level:
            for child in (item.values() if type(item) is dict else item):
                if type(child) in (dict, list):
                    deeper.append(child)
        level, depth = deeper, depth + 1
    return False
