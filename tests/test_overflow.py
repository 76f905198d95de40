"""Which turns a chat that outgrows its context leaves out (runtime/overflow.py), counted in characters
here: the policy's choices do not depend on the tokenizer (the window's and the API's tests count with
the model's own)."""

from __future__ import annotations

import pytest

from localchat.errors import ContextOverflowError
from localchat.runtime.overflow import fit, turns_of


def chat(turns: int, size: int = 100) -> list[dict]:
    messages = [{"role": "system", "content": "s" * 10}]
    for i in range(turns):
        messages += [{"role": "user", "content": f"{i}".ljust(size, "u")}, {"role": "assistant", "content": "a" * 10}]
    return messages[:-1]  # the newest turn is a question yet to be answered


def chars(messages: list[dict]) -> int:
    return sum(len(m["content"]) for m in messages)


def test_rolling_leaves_out_the_oldest_turns_and_keeps_the_system_prompt_and_the_newest():
    messages = chat(20)
    fitted = fit(messages, chars, 1000, "rolling")
    assert fitted.gone == tuple(range(len(fitted.gone))) and chars(fitted.messages) <= 1000 * 0.75
    assert fitted.messages[0]["role"] == "system" and fitted.messages[-1] == messages[-1]
    assert fitted.messages[1]["role"] == "user" and fitted.tokens == chars(fitted.messages)
    assert fitted.note() == f"{fitted.left_out} early turns left out to fit the context"
    # What fits is left alone, and the roles still alternate after the system prompt.
    assert fit(messages, chars, 10_000, "rolling").gone == ()
    roles = [m["role"] for m in fitted.messages[1:]]
    assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"]


def test_truncate_middle_keeps_the_first_turn_and_pinned_turns_stay():
    messages = chat(20)
    fitted = fit(messages, chars, 1000, "truncate-middle")
    assert fitted.gone[0] == 1 and fitted.messages[1] == messages[1]
    pinned = fit(messages, chars, 1000, "rolling", pinned=lambda i: i in (0, 3))
    assert 0 not in pinned.gone and 3 not in pinned.gone and chars(pinned.messages) <= 1000


def test_the_turns_left_out_only_grow_and_a_quarter_of_the_room_is_cleared_at_once():
    messages = chat(20)
    first = fit(messages, chars, 1000, "rolling")
    longer = messages + [{"role": "assistant", "content": "a" * 10}, {"role": "user", "content": "u" * 100}]
    # The next turn still fits with the same turns left out: the prompt's start does not change.
    assert fit(longer, chars, 1000, "rolling", at_least=first.left_out).gone == first.gone
    # A turn left out before is never taken back, even when the room would allow it.
    assert fit(longer, chars, 5000, "rolling", at_least=first.left_out).gone == first.gone


def test_refuse_and_what_cannot_fit_are_errors_that_say_what_to_do():
    with pytest.raises(ContextOverflowError, match="rolling or truncate-middle"):
        fit(chat(20), chars, 1000, "refuse")
    assert fit(chat(2), chars, 1000, "refuse").gone == ()
    huge = chat(3) + [{"role": "assistant", "content": ""}, {"role": "user", "content": "q" * 2000}]
    with pytest.raises(ContextOverflowError, match="even with every earlier turn left out"):
        fit(huge, chars, 1000, "rolling")
    with pytest.raises(ValueError):
        fit(chat(2), chars, 1000, "sideways")


def test_the_count_is_asked_a_logarithmic_number_of_times():
    asked = {}
    for turns in (64, 1024):
        calls = []
        fit(chat(turns, 10), lambda m: calls.append(1) or chars(m), 300, "rolling")
        asked[turns] = len(calls)
    assert asked[1024] <= asked[64] + 12 and asked[1024] < 40  # log2(1024 / 64) = 4 more halvings, twice


def test_a_turn_is_a_user_message_and_what_answered_it():
    head, turns = turns_of([{"role": "system", "content": ""}, {"role": "user", "content": ""},
                            {"role": "assistant", "content": "", "tool_calls": []}, {"role": "tool", "content": ""},
                            {"role": "assistant", "content": ""}, {"role": "user", "content": ""}])
    assert len(head) == 1 and [len(t) for t in turns] == [4, 1]
