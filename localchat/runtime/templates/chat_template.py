"""Chat messages -> prompt text, with the model's own Jinja template rendered in a bounded sandbox.

The template comes from the model file, so it is untrusted: it renders in Jinja2's immutable
sandbox with limits on loops, sizes, output and time. The rendered prompt remembers which
stretches are the template's own text: only those may turn into special tokens, so a message
cannot forge a control token (a fake system turn).
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from datetime import datetime
from typing import Any, Iterator

from jinja2 import TemplateError

from ...errors import RequestError
from .template_sandbox import BoundedEnvironment, Budget, current_budget

log = logging.getLogger(__name__)

# Used only when a GGUF carries no template (tiny test models, some conversions).
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# The fallback's own markers: a model that was never taught them (a base model) writes them as text and goes
# on to play the next turn too, so an answer stops at either.
CHATML_STOPS = ("<|im_end|>", "<|im_start|>")

ROLES = {"system", "user", "assistant", "tool"}

MAX_OUTPUT_SLACK = 1_000_000  # characters of template text a render may add to the messages'
MAX_CHARS_PER_TOKEN = 32  # a request over n_ctx times this many characters cannot fit
# Characters every special-token family starts or ends with (<|im_start|>, <start_of_turn>, [INST]).
_MARKER_CHARS = frozenset("<[|")


class Prompt(str):
    """Prompt text with its pieces: (text, True) for the template's own text, (text, False) for messages."""

    pieces: tuple[tuple[str, bool], ...]

    def __new__(cls, text: str, pieces: tuple[tuple[str, bool], ...]) -> "Prompt":
        prompt = super().__new__(cls, text)
        prompt.pieces = pieces
        return prompt

    def __reduce__(self) -> tuple:
        return Prompt, (str(self), self.pieces)  # pickled whole: a model runner tokenizes it piece by piece

    def each_piece(self) -> Iterator[tuple[str, bool]]:
        """The pieces, checking the request's time budget before each (tokenizing may be long)."""
        budget = current_budget()
        for piece in self.pieces:
            if budget is not None:
                budget.check("reading the prompt")
            yield piece


def _raise(message: str) -> None:
    raise TemplateError(message)


class ChatTemplate:
    """A compiled chat template with the special tokens it may refer to."""

    def __init__(self, source: str | None, bos_token: str = "", eos_token: str = "") -> None:
        if not source:
            log.info("the model has no chat template (a base model, or a conversion that left it out); using ChatML")
        self.source = source or CHATML
        self.fallback = not source  # no template of its own: a base model, most likely, not tuned to chat
        # {% break %} and {% continue %} as transformers allows them (Kimi K3's template uses them).
        env = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        # As transformers' tojson: a template may ask for its own keys, indent and separators (GLM 4.5+).
        env.filters["tojson"] = lambda value, indent=None, ensure_ascii=False, separators=None, sort_keys=False: \
            json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            self._template = env.from_string(self.source)
        except TemplateError as exc:
            log.warning("the model's chat template does not compile (%s); using ChatML", exc)
            self._template = env.from_string(CHATML)
            self.fallback = True
        self.bos_token = bos_token
        self.eos_token = eos_token

    @property
    def stops(self) -> tuple[str, ...]:
        """Strings that end an answer whatever the request asks: the fallback's markers when it is used."""
        return CHATML_STOPS if self.fallback else ()

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
               tools: list[dict[str, Any]] | None = None, switches: dict[str, Any] | None = None) -> Prompt:
        """The prompt text for `messages` (and `tools`, for templates that know them), ending where the
        assistant's answer starts. `switches`: variables the template reads (enable_thinking,
        reasoning_effort), checked by check_switches."""
        budget = current_budget()
        if budget is None:  # a caller without a budget of its own (CLI, tests) still gets the bounds
            return Budget().run(self.render, messages, add_generation_prompt, tools, switches)
        validate_messages(messages)
        # The same messages with each content replaced by a unique mark: what is left is the
        # template's own text, and the marks say where each message's text goes. Other strings from
        # the client (tools, past tool calls) are marked too when they hold a marker character.
        nonce = secrets.token_hex(6)
        strings = [m["content"] for m in messages]

        def mark(value: str) -> str:
            strings.append(value)
            return f"\ue000{nonce}:{len(strings) - 1}\ue001"

        # An empty content stays empty: it has no text to keep apart, and templates test it (gpt-oss refuses
        # a turn with calls whose content and thinking are both set).
        marked = [{**_marked({k: v for k, v in m.items() if k != "content"}, mark),
                   "content": f"\ue000{nonce}:{i}\ue001" if m["content"] else ""} for i, m in enumerate(messages)]
        marked_tools = _marked(tools, mark) if tools else None
        limit = sum(map(len, strings)) * 2 + MAX_OUTPUT_SLACK
        with budget.watching():
            text = self._render(messages, add_generation_prompt, limit, tools, switches)
            skeleton = self._render(marked, add_generation_prompt, limit, marked_tools, switches)
        pieces = _pieces(text, skeleton, nonce, strings)
        if pieces is None:
            if any(_MARKER_CHARS.intersection(c) for c in strings):
                raise RequestError("the model's chat template changes message text, so localchat cannot keep "
                                   "it apart from the template's control tokens; remove '<', '[' and '|' from "
                                   "the messages or use another model.", "messages")
            pieces = ((text, True),)
        return Prompt(text, pieces)

    def _render(self, messages: list[dict[str, Any]], add_generation_prompt: bool, limit: int,
                tools: list[dict[str, Any]] | None = None, switches: dict[str, Any] | None = None) -> str:
        parts, size = [], 0
        extra = {**check_switches(switches), **({"tools": tools} if tools else {})}
        try:
            for part in self._template.generate(messages=messages, add_generation_prompt=add_generation_prompt,
                                                bos_token=self.bos_token, eos_token=self.eos_token, **extra):
                size += len(part)
                if size > limit:
                    raise TemplateError(f"its output passed {limit:,} characters")
                parts.append(part)
        except TemplateError as exc:
            raise RequestError(f"the model's chat template rejected these messages: {exc}") from None
        except (OverflowError, MemoryError, RecursionError) as exc:  # the sandbox's own limits
            raise RequestError(f"the model's chat template failed on these messages ({type(exc).__name__}); "
                               "use another model or shorter messages.") from None
        return "".join(parts)


def _marked(value: Any, mark: Any) -> Any:
    """`value` with each string that holds a marker character replaced by mark(string)."""
    if isinstance(value, str):
        return mark(value) if _MARKER_CHARS.intersection(value) else value
    if isinstance(value, dict):
        return {_marked(k, mark): _marked(v, mark) for k, v in value.items()}
    if isinstance(value, list):
        return [_marked(v, mark) for v in value]
    return value


_MARK = re.compile("\ue000([0-9a-f]{12}):([0-9]+)\ue001")


def _pieces(text: str, skeleton: str, nonce: str, contents: list[str]) -> tuple[tuple[str, bool], ...] | None:
    """Split `text` into template text and message text by the marks in `skeleton`; None if they disagree."""
    slots: list[str | int] = []  # template text, or the index of the message printed there
    last = 0
    for match in _MARK.finditer(skeleton):
        if match.group(1) != nonce or int(match.group(2)) >= len(contents):
            return None
        slots += [skeleton[last:match.start()], int(match.group(2))]
        last = match.end()
    slots.append(skeleton[last:])
    pieces: list[tuple[str, bool]] = []
    pos = 0
    for n, slot in enumerate(slots):
        if isinstance(slot, str):
            if not text.startswith(slot, pos):
                return None
            if slot:
                pieces.append((slot, True))
            pos += len(slot)
            continue
        # Templates often trim a message (`content | trim`); the mark has no spaces to trim.
        after = slots[n + 1] if n + 1 < len(slots) and isinstance(slots[n + 1], str) else ""
        # A string inside a tool's JSON (`tojson`) is printed escaped.
        escaped = json.dumps(contents[slot], ensure_ascii=False)[1:-1]
        for candidate in dict.fromkeys((contents[slot], contents[slot].strip(), escaped)):
            if text.startswith(candidate, pos) and text.startswith(after, pos + len(candidate)):
                if candidate:
                    pieces.append((candidate, False))
                pos += len(candidate)
                break
        else:
            return None
    return tuple(pieces) if pos == len(text) else None


MAX_SWITCHES = 16
RESERVED = frozenset({"messages", "tools", "add_generation_prompt", "bos_token", "eos_token", "raise_exception",
                      "strftime_now"})


def check_switches(switches: Any) -> dict[str, Any]:
    """Template variables a request sets (chat_template_kwargs): a few names, each a plain value, never one
    the renderer itself sets."""
    if not switches:
        return {}
    if not isinstance(switches, dict) or len(switches) > MAX_SWITCHES:
        raise RequestError(f"chat_template_kwargs must be an object of at most {MAX_SWITCHES} names.",
                           "chat_template_kwargs")
    for name, value in switches.items():
        if not (isinstance(name, str) and name.isidentifier() and len(name) <= 64) or name in RESERVED:
            raise RequestError(f"chat_template_kwargs cannot set {str(name)[:64]!r}: give template variable "
                               "names such as enable_thinking.", "chat_template_kwargs")
        if not (value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 256)):
            raise RequestError(f"chat_template_kwargs.{name} must be true, false, a number or a short string.",
                               "chat_template_kwargs")
    return dict(switches)


def validate_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list of {role, content} objects.")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise RequestError(f"message {i} needs a role, one of {', '.join(sorted(ROLES))}.")
        if not isinstance(message.get("content"), str):
            raise RequestError(f"message {i} needs its content as a string.")


def check_prompt_size(texts: list[str], n_ctx: int) -> None:
    """Refuse, before any tokenizing, a request that cannot fit the context whatever its tokens."""
    # Each message costs at least its role markers; a token is rarely more than a few characters.
    max_messages, max_chars = max(n_ctx // 2, 1), n_ctx * MAX_CHARS_PER_TOKEN
    if len(texts) > max_messages:
        raise RequestError(f"{len(texts):,} messages cannot fit this model's context of {n_ctx:,} tokens; "
                           f"send at most {max_messages:,}.", "messages")
    chars = sum(map(len, texts))
    if chars > max_chars:
        raise RequestError(f"the request holds {chars:,} characters, far more than this model's context of "
                           f"{n_ctx:,} tokens can take; shorten it (at most {max_chars:,} characters).")

