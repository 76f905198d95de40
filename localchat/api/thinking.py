"""What a request asks of a thinking model, made into what the template and the sampler take: the
template's own switch (enable_thinking, reasoning_effort), and a tools or JSON grammar that starts after
the thinking, never inside it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import RequestError
from ..runtime.constraints.grammar import Grammar
from ..runtime.constraints.lazy_trigger import regex_literal
from ..runtime.constraints.schema_check import SchemaCheck
from ..runtime.templates.thinking import ThinkingStyle, closed_by_prompt, opened_by_prompt

LEVELS = ("low", "medium", "high")


def check_thinking(value: Any, param: str) -> bool | str | None:
    """A request's thinking switch: true, false, or a level (low, medium, high)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in LEVELS:
        return value.lower()
    if isinstance(value, str) and value.lower() in ("none", "minimal"):
        return False
    raise RequestError(f"{param} must be true, false or one of {', '.join(LEVELS)}.", param)


def switches_for(style: ThinkingStyle | None, thinking: bool | str | None,
                 template_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """The template variables for this request: the client's own (chat_template_kwargs) and the model's
    switch set from `thinking`. A model without a switch thinks as it always does."""
    switches = dict(template_kwargs or {})
    if thinking is None or style is None or style.switch is None or style.switch in switches:
        return switches
    if style.levels:  # gpt-oss always thinks: "off" is its lowest effort
        switches[style.switch] = thinking if isinstance(thinking, str) else ("medium" if thinking else "low")
    else:
        switches[style.switch] = bool(thinking)
    return switches


def after_thinking(grammar: Grammar | None, style: ThinkingStyle | None, prompt: str) -> Grammar | None:
    """`grammar` for an answer that may think first: its trigger counts only after the thinking closes, and
    a grammar that holds from the first token holds from the end of the thinking."""
    if grammar is None or style is None or style.name == "harmony" or closed_by_prompt(style, prompt):
        return grammar
    opened = opened_by_prompt(style, prompt)
    close, open_ = regex_literal(style.close), regex_literal(style.open)
    if isinstance(grammar.check, SchemaCheck):  # the finished answer's check reads past the thinking too
        grammar = dataclasses.replace(grammar, check=dataclasses.replace(grammar.check, thought=style.close))
    if grammar.triggers:
        # Opened by the prompt: the close comes first. Else the model may open a block itself; if it
        # does, the trigger counts only after its close.
        after = f"[\\s\\S]*?{close}" if opened else f"(?:\\s*{open_}[\\s\\S]*?{close}|(?!\\s*{open_}))"
        return dataclasses.replace(grammar, after=after)
    body = grammar.gbnf.replace("root ::=", "answer-root ::=", 1)
    if opened:  # free thinking until the close, then the grammar
        gbnf = f"root ::= {_literal(style.close)} [ \\t\\n]* answer-root\n{body}"
        return dataclasses.replace(grammar, gbnf=gbnf, triggers=(style.close,))
    thought = _not_containing(style.close)
    gbnf = (f"root ::= ({_literal(style.open)} thought {_literal(style.close)} [ \\t\\n]*)? answer-root\n"
            f"thought ::= {thought}\n{body}")
    return dataclasses.replace(grammar, gbnf=gbnf)


def _literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _not_containing(marker: str) -> str:
    """GBNF for any text without `marker` in it (each of the marker's beginnings followed by the wrong
    next character)."""
    alternatives = [f"[^{_class(marker[0])}]"]
    for n in range(1, len(marker)):
        alternatives.append(f"{_literal(marker[:n])} [^{_class(marker[n])}]")
    return "(" + " | ".join(alternatives) + ")*"


def _class(char: str) -> str:
    return "\\" + char if char in "]\\^-" else char
