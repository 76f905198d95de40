"""The XML-like tool-call forms, read back into (name, arguments): Qwen3-Coder's and Qwen3.5's
`<function=NAME><parameter=KEY>VALUE</parameter></function>`, GLM 4.5+'s `NAME<arg_key>KEY</arg_key>
<arg_value>VALUE</arg_value>`, DeepSeek V3.2/V4's DSML `<｜DSML｜invoke name="NAME"><｜DSML｜parameter
name="KEY" string="true">VALUE</｜DSML｜parameter></｜DSML｜invoke>`, Kimi K3's XTML `<|open|>call tool="NAME"
index="1"<|sep|><|open|>argument key="KEY" type="string"<|sep|>VALUE<|close|>argument<|sep|>`.

Values are written bare, so a closing tag inside an argument is text unless what follows it is the form's
next tag; each value is typed by the tool's schema (a string stays as written). One pass with str.find.
"""

from __future__ import annotations

from typing import Any

from .json_values import JSONUnreadable, json_value

Schemas = dict[str, dict[str, Any]]  # tool name -> its parameters schema
PYTHON_LITERALS = {"True": True, "False": False, "None": None}  # some models write Python's, not JSON's


class CallUnreadable(ValueError):
    """The text between a call's markers is not a call of its family."""


def typed(value: str, name: str, tool: str, schemas: Schemas) -> Any:
    """A bare parameter's text as the schema's type: a string stays as written; anything else is JSON
    where it reads as JSON (1, true, {...}) or a Python literal, else the text."""
    kind = ((schemas.get(tool) or {}).get("properties") or {}).get(name, {}).get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "string" in kinds and not (value.strip() == "null" and "null" in kinds):
        return value
    if value.strip() in PYTHON_LITERALS:
        return PYTHON_LITERALS[value.strip()]
    try:
        return json_value(value)
    except JSONUnreadable:
        return value


def _trim_one_newline(value: str) -> str:
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


def _value_end(text: str, pos: int) -> int:
    """Where a Qwen XML value starting at `pos` ends: at a </parameter> that the next tag follows, or (the
    model left the close out) at a new parameter or the function's end on a line of their own."""
    ends = []
    at = text.find("</parameter>", pos)
    while at >= 0:
        after = text[at + len("</parameter>"):].lstrip()
        if not after or after.startswith(("<parameter=", "</function>", "</tool_call>")):
            ends.append(at)
            break
        at = text.find("</parameter>", at + 1)
    for tag in ("\n<parameter=",):
        found = text.find(tag, pos)
        if found >= 0:
            ends.append(found)
    last = text.rfind("\n</function>", pos)
    if last >= 0:
        ends.append(last)
    if not ends:
        raise CallUnreadable("a parameter is not closed")
    return min(ends)


def qwen_xml_call(text: str, schemas: Schemas) -> tuple[str, dict[str, Any]]:
    at = text.find("<function=")
    stop = text.find(">", at)
    if at < 0 or stop < 0:
        raise CallUnreadable("no <function=NAME>")
    name, pos = text[at + len("<function="):stop].strip(), stop + 1
    args: dict[str, Any] = {}
    while True:
        at = text.find("<parameter=", pos)
        close = text.find("</function>", pos)
        if at < 0 or (0 <= close < at):
            break
        stop = text.find(">", at)
        if stop < 0:
            raise CallUnreadable("a <parameter= is not closed")
        key = text[at + len("<parameter="):stop].strip()
        end = _value_end(text, stop + 1)
        args[key] = typed(_trim_one_newline(text[stop + 1:end]), key, name, schemas)
        pos = end + (len("</parameter>") if text.startswith("</parameter>", end) else 0)
    return name, args


def _glm_key(text: str, pos: int) -> int:
    """The next <arg_key> at or after `pos` that is a key (its </arg_key> then an <arg_value>), or -1."""
    at = text.find("<arg_key>", pos)
    while at >= 0:
        close = text.find("</arg_key>", at)
        if close >= 0 and text[close + len("</arg_key>"):].lstrip().startswith("<arg_value>"):
            return at
        at = text.find("<arg_key>", at + 1)
    return -1


def _glm_value_end(text: str, start: int) -> int:
    """A value ends at the </arg_value> that the next key or the end follows; one left without its closing
    tag (GLM 4.7 drops it at times) runs to the next key, or to the end."""
    nxt = _glm_key(text, start)
    stop = text.find("</arg_value>", start)
    while stop >= 0:
        after = text[stop + len("</arg_value>"):].lstrip()
        if (not after or after.startswith("<arg_key>")) and (nxt < 0 or stop < nxt):
            return stop
        stop = text.find("</arg_value>", stop + 1)
    return nxt if nxt >= 0 else len(text)


def glm_call(text: str, schemas: Schemas) -> tuple[str, dict[str, Any]]:
    at = _glm_key(text, 0)
    name = (text if at < 0 else text[:at]).strip()
    if not name or "<" in name:
        raise CallUnreadable("no name")
    args: dict[str, Any] = {}
    while at >= 0:
        key_end = text.find("</arg_key>", at)
        start = text.find("<arg_value>", key_end) + len("<arg_value>")
        key = text[at + len("<arg_key>"):key_end].strip()
        end = _glm_value_end(text, start)
        args[key] = typed(text[start:end], key, name, schemas)
        at = _glm_key(text, end)
    return name, args


DSML = "｜DSML｜"


def _tag(text: str, name: str, pos: int, closing: bool = False) -> tuple[int, int]:
    """Where the DSML tag `name` (written `<｜DSML｜name` or `<｜DSML｜ name`) starts at `pos` after white
    space, and where its name ends; (-1, -1) when the text there is not that tag."""
    at = len(text) - len(text[pos:].lstrip())
    for spelled in (f"<{'/' if closing else ''}{DSML}{name}", f"<{'/' if closing else ''}{DSML} {name}"):
        if text.startswith(spelled, at):
            return at, at + len(spelled)
    return -1, -1


def _attribute(text: str, name: str, pos: int, end: int) -> str | None:
    at = text.find(f'{name}="', pos, end)
    if at < 0:
        return None
    stop = text.find('"', at + len(name) + 2, end)
    return text[at + len(name) + 2:stop] if stop >= 0 else None


def read_dsml(text: str, schemas: Schemas, cut: bool) -> list[tuple[str, dict[str, Any]]]:
    """Every whole invoke of a DSML section (from its opening tag); `cut`: the ones before the cut."""
    pos = text.find(">") + 1
    calls: list[tuple[str, dict[str, Any]]] = []
    while True:
        at, after = _tag(text, "invoke", pos)
        if at < 0:
            if text[pos:].strip() and not cut:
                raise CallUnreadable("the section holds something other than invokes")
            return calls
        head_end = text.find(">", after)
        name = _attribute(text, "name", after, head_end) if head_end >= 0 else None
        if name is None:
            if cut:
                return calls
            raise CallUnreadable("an invoke has no name")
        args: dict[str, Any] = {}
        pos = head_end + 1
        if text[head_end - 1] == "/":  # <｜DSML｜invoke name="x"/>
            calls.append((name, args))
            continue
        while True:
            end_at, end_after = _tag(text, "invoke>", pos, closing=True)
            if end_at >= 0:
                calls.append((name, args))
                pos = end_after
                break
            p_at, p_after = _tag(text, "parameter", pos)
            p_end = text.find(">", p_after) if p_at >= 0 else -1
            close = text.find(f"</{DSML}parameter>", p_end) if p_end >= 0 else -1
            spaced = text.find(f"</{DSML} parameter>", p_end) if p_end >= 0 else -1
            close, close_len = (close, len(f"</{DSML}parameter>")) if close >= 0 and not (0 <= spaced < close) \
                else (spaced, len(f"</{DSML} parameter>"))
            key = _attribute(text, "name", p_after, p_end) if p_end >= 0 else None
            if p_at < 0 or key is None or close < 0:
                if cut:
                    return calls
                raise CallUnreadable("an invoke is not closed")
            raw = text[p_end + 1:close]
            args[key] = raw if _attribute(text, "string", p_after, p_end) == "true" else typed(raw, key, name, schemas)
            pos = close + close_len


XTML_SEP = "<|sep|>"
XTML_ARGUMENT, XTML_ARGUMENT_END = "<|open|>argument", "<|close|>argument<|sep|>"
XTML_JSON, XTML_JSON_END = "<|open|>json", "<|close|>json<|sep|>"


def _xtml_attributes(head: str) -> dict[str, str]:
    """An XTML open tag's attributes (`<|open|>call tool="x" index="1"`), their &quot; and &amp; undone."""
    found: dict[str, str] = {}
    pos = head.find(" ")
    while 0 <= pos < len(head):
        eq = head.find('="', pos)
        end = head.find('"', eq + 2) if eq >= 0 else -1
        if end < 0:
            break
        found[head[pos:eq].strip()] = head[eq + 2:end].replace("&quot;", '"').replace("&amp;", "&")
        pos = end + 1
    return found


def _xtml_value_end(text: str, start: int) -> int:
    """A value ends at the close that the next element or the call's end follows: a close written inside a
    value is text."""
    at = text.find(XTML_ARGUMENT_END, start)
    while at >= 0:
        after = text[at + len(XTML_ARGUMENT_END):].lstrip()
        if not after or after.startswith((XTML_ARGUMENT, XTML_JSON)):
            return at
        at = text.find(XTML_ARGUMENT_END, at + 1)
    raise CallUnreadable("an argument is not closed")


def xtml_whole(text: str) -> bool:
    """Whether a call's text ends with its last element closed (else its closer is text of a value)."""
    body = text.rstrip()
    return body.endswith((XTML_ARGUMENT_END, XTML_JSON_END)) or (XTML_ARGUMENT not in body and XTML_JSON not in body)


def xtml_call(text: str, schemas: Schemas) -> tuple[str, dict[str, Any]]:
    """One Kimi K3 call: its arguments each typed by its own `type` attribute (or a JSON block of them)."""
    head_end = text.find(XTML_SEP)
    name = _xtml_attributes(text[:head_end]).get("tool") if head_end >= 0 else None
    if not name:
        raise CallUnreadable("no tool named")
    args: dict[str, Any] = {}
    pos = head_end + len(XTML_SEP)
    while text[pos:].strip():
        at = len(text) - len(text[pos:].lstrip())
        sep = text.find(XTML_SEP, at)
        if sep < 0 or not text.startswith((XTML_ARGUMENT, XTML_JSON), at):
            raise CallUnreadable("the call holds something other than arguments")
        start = sep + len(XTML_SEP)
        if text.startswith(XTML_JSON, at):
            end = text.find(XTML_JSON_END, start)
            try:
                block = json_value(text[start:end]) if end >= 0 else None
            except JSONUnreadable:
                block = None
            if not isinstance(block, dict):
                raise CallUnreadable("its JSON block is not an object")
            args.update(block)
            pos = end + len(XTML_JSON_END)
            continue
        attributes = _xtml_attributes(text[at:sep])
        key, end = attributes.get("key"), _xtml_value_end(text, start)
        if key is None:
            raise CallUnreadable("an argument has no key")
        args[key] = _xtml_typed(text[start:end], attributes.get("type"), key, name, schemas)
        pos = end + len(XTML_ARGUMENT_END)
    return name, args


def _xtml_typed(raw: str, kind: str | None, key: str, tool: str, schemas: Schemas) -> Any:
    if kind == "string":
        return raw
    if kind in ("number", "boolean", "null", "object", "array"):
        try:
            return json_value(raw)
        except JSONUnreadable:
            pass
    return typed(raw, key, tool, schemas)
