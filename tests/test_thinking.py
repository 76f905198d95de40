"""Thinking read apart without a model: each family's style known from its real template, the split of a
streamed answer into thinking and answer in every chunking (no marker, nor part of one, on either side),
harmony's channels, a grammar that waits for the thinking to close, the template's switches."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from localchat.api.reader import reader_for
from localchat.api.thinking import after_thinking, check_thinking, switches_for
from localchat.api.tool_formats import detect_format
from localchat.api.tool_parser import ArgsDelta, CallStart
from localchat.errors import RequestError
from localchat.runtime.constraints.grammar import Grammar
from localchat.runtime.templates.chat_template import ChatTemplate
from localchat.runtime.templates.thinking import ThinkingSplitter, Thought, opened_by_prompt, thinking_style

TEMPLATES = Path(__file__).parent / "data" / "templates"
MARKERS = ("<think>", "</think>", "[THINK]", "[/THINK]", "<|channel>", "<channel|>", "<|channel|>", "<|message|>",
           "<|end|>", "<|start|>")


def template(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


def chunkings(text: str) -> list[list[str]]:
    """The text whole, one character at a time, at every split in two, and in seeded random groups."""
    out = [[text], list(text)] + [[text[:i], text[i:]] for i in range(1, len(text))]
    for seed in range(8):
        rng, pos, parts = random.Random(seed), 0, []
        while pos < len(text):
            k = rng.randint(1, 6)
            parts.append(text[pos:pos + k])
            pos += k
        out.append(parts)
    return out


def split(style_template: str, prompt: str, deltas: list[str], markers: tuple[str, ...] = MARKERS) -> tuple[str, str]:
    """(thinking, answer) of the deltas, checking every piece on the way for `markers`."""
    reader = reader_for(thinking_style(template(style_template)), prompt, None, set())
    pieces = [p for d in deltas for p in reader.feed(d)] + reader.finish()
    for piece in pieces:
        text = piece.text if isinstance(piece, Thought) else piece
        assert not any(m in text for m in markers), pieces
    return ("".join(p.text for p in pieces if isinstance(p, Thought)),
            "".join(p for p in pieces if isinstance(p, str)))


@pytest.mark.parametrize("name, style, switch", [
    ("Qwen-Qwen3-0.6B.jinja", "think", "enable_thinking"),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "think", "enable_thinking"),
    ("GLM-4.6.jinja", "think", "enable_thinking"),
    ("Kimi-K2-Thinking.jinja", "think", None),
    ("openai-gpt-oss-120b.jinja", "harmony", "reasoning_effort"),
    ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", "mistral", None),
    ("google-gemma-4-31B-it.jinja", "gemma4", "enable_thinking"),
    ("Kimi-K3.jinja", "xtml", "thinking"),
])
def test_each_thinking_family_is_known_from_its_template(name: str, style: str, switch: str | None):
    found = thinking_style(template(name))
    assert found is not None and found.name == style and found.switch == switch
    assert thinking_style(template("meta-llama-Llama-3.3-70B-Instruct.jinja")) is None


@pytest.mark.parametrize("deltas", chunkings("<think>\nLet me see: 2 < 3.\n</think>\n\nYes, 2 < 3."))
def test_a_think_block_the_model_opens_is_apart_in_every_chunking(deltas: list[str]):
    assert split("Qwen-Qwen3-0.6B.jinja", "<|im_start|>assistant\n", deltas) == ("Let me see: 2 < 3.", "Yes, 2 < 3.")


@pytest.mark.parametrize("deltas", chunkings("Only the close comes </thin and more.\n</think>\n\nAnswer </think"))
def test_a_block_the_prompt_opened_carries_only_its_close(deltas: list[str]):
    # DeepSeek-R1 and Qwen3-2507-Thinking open the block in the prompt; text that only looks like a marker's
    # start stays text, and a marker cut by the end of the answer is dropped, never shown.
    prompt = "<｜Assistant｜><think>\n"
    assert opened_by_prompt(thinking_style("</think>"), prompt)
    assert split("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", prompt, deltas) == \
        ("Only the close comes </thin and more.", "Answer ")


@pytest.mark.parametrize("deltas", chunkings("Hello <think>not thinking</think> at all"))
def test_an_answer_that_does_not_start_thinking_is_all_answer_and_never_shows_a_marker(deltas: list[str]):
    assert split("Qwen-Qwen3-0.6B.jinja", "<|im_start|>assistant\n", deltas) == ("", "Hello not thinking at all")


def test_a_prompt_that_closed_the_block_means_no_thinking_to_read():
    prompt = ChatTemplate(template("Qwen-Qwen3-0.6B.jinja")).render([{"role": "user", "content": "Hi"}],
                                                                   switches={"enable_thinking": False})
    assert prompt.rstrip().endswith("</think>")
    assert reader_for(thinking_style(template("Qwen-Qwen3-0.6B.jinja")), prompt, None, set()) is None


XTML = ("<|open|>", "<|close|>", "<|sep|>")


@pytest.mark.parametrize("deltas", chunkings("Sum: 4.<|close|>think<|sep|><|open|>response<|sep|>It is 4."
                                             "<|close|>response<|sep|><|close|>message<|sep|>"))
def test_kimi_k3s_thinking_and_the_elements_around_its_answer(deltas: list[str]):
    # The thinking element the prompt opened, then the response element: no tag of either is ever text.
    source = template("Kimi-K3.jinja")
    thinking = ChatTemplate(source).render([{"role": "user", "content": "2+2?"}])
    assert opened_by_prompt(thinking_style(source), thinking)
    assert split("Kimi-K3.jinja", thinking, deltas, XTML) == ("Sum: 4.", "It is 4.")
    # Switched off, the prompt opens the response element itself; the reader still leaves out its close.
    answering = ChatTemplate(source).render([{"role": "user", "content": "2+2?"}], switches={"thinking": False})
    assert not opened_by_prompt(thinking_style(source), answering)
    assert split("Kimi-K3.jinja", answering, ["It is 4.<|close|>response<|sep|><|close|>message<|sep|>"], XTML) == \
        ("", "It is 4.")


@pytest.mark.parametrize("deltas", chunkings("[THINK]Sum: 4.[/THINK]It is 4."))
def test_mistral_and_gemma_markers(deltas: list[str]):
    assert split("mistralai-Ministral-3-14B-Reasoning-2512.jinja", "[/INST]", deltas) == ("Sum: 4.", "It is 4.")


HARMONY = ("<|channel|>analysis<|message|>User wants weather; call it.<|end|><|start|>assistant<|channel|>"
           "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}")
FINAL = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Paris."


@pytest.mark.parametrize("deltas", chunkings(HARMONY)[:60] + chunkings(HARMONY)[-8:])
def test_harmony_channels_give_thinking_and_a_call_in_every_chunking(deltas: list[str]):
    source = template("openai-gpt-oss-120b.jinja")
    reader = reader_for(thinking_style(source), "<|start|>assistant", detect_format(source), {"get_weather"})
    pieces = [p for d in deltas for p in reader.feed(d)] + reader.finish()
    assert "".join(p.text for p in pieces if isinstance(p, Thought)) == "User wants weather; call it."
    assert not [p for p in pieces if isinstance(p, str)]
    assert [p.name for p in pieces if isinstance(p, CallStart)] == ["get_weather"]
    assert "".join(p.text for p in pieces if isinstance(p, ArgsDelta)) == '{"city": "Paris"}'


@pytest.mark.parametrize("deltas", chunkings(FINAL))
def test_harmony_final_channel_is_the_answer(deltas: list[str]):
    assert split("openai-gpt-oss-120b.jinja", "<|start|>assistant", deltas) == ("Easy.", "Paris.")


def test_a_harmony_call_cut_by_max_tokens_is_no_call():
    source = template("openai-gpt-oss-120b.jinja")
    reader = reader_for(thinking_style(source), "<|start|>assistant", detect_format(source), {"get_weather"})
    reader.feed(HARMONY[:-5])
    reader.finish(cut=True)
    assert reader.calls == [] and reader.broken is None


def test_switches_for_each_kind_of_switch():
    qwen, oss = thinking_style(template("Qwen-Qwen3-0.6B.jinja")), thinking_style(template("openai-gpt-oss-120b.jinja"))
    assert switches_for(qwen, False, None) == {"enable_thinking": False}
    assert switches_for(qwen, "high", None) == {"enable_thinking": True}
    assert switches_for(qwen, None, {"enable_thinking": False}) == {"enable_thinking": False}
    assert switches_for(oss, "high", None) == {"reasoning_effort": "high"}
    assert switches_for(oss, False, None) == {"reasoning_effort": "low"}
    assert switches_for(None, True, None) == {}
    assert check_thinking("High", "think") == "high" and check_thinking("none", "x") is False
    with pytest.raises(RequestError, match="reasoning_effort"):
        check_thinking("extreme", "reasoning_effort")


def test_the_switch_reaches_the_real_template():
    source = ChatTemplate(template("openai-gpt-oss-120b.jinja"))
    prompt = source.render([{"role": "user", "content": "Hi"}], switches={"reasoning_effort": "high"})
    assert "Reasoning: high" in prompt
    with pytest.raises(RequestError, match="cannot set"):
        source.render([{"role": "user", "content": "Hi"}], switches={"messages": []})


def test_a_tools_grammar_waits_for_the_thinking():
    style = thinking_style(template("Qwen-Qwen3-0.6B.jinja"))
    lazy = Grammar('root ::= "<tool_call>" [a-z]*', ("<tool_call>",))
    opened = after_thinking(lazy, style, "<|im_start|>assistant\n<think>\n")
    assert opened.after == "[\\s\\S]*?</think>"
    maybe = after_thinking(lazy, style, "<|im_start|>assistant\n")
    assert maybe.after.startswith("(?:\\s*<think>") and "(?!" in maybe.after
    assert after_thinking(lazy, style, "<|im_start|>assistant\n<think>\n\n</think>\n\n") is lazy
    strict = Grammar('root ::= "{" [a-z]* "}"')
    required = after_thinking(strict, style, "<|im_start|>assistant\n<think>\n")
    assert required.triggers == ("</think>",) and required.gbnf.startswith('root ::= "</think>"')
    optional = after_thinking(strict, style, "<|im_start|>assistant\n")
    assert "thought ::=" in optional.gbnf and optional.triggers == ()


def test_the_answers_check_reads_past_the_thinking():
    from localchat.api.structured import schema_grammar

    style = thinking_style(template("Qwen-Qwen3-0.6B.jinja"))
    grammar = schema_grammar({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}, "s")
    wrapped = after_thinking(grammar, style, "<|im_start|>assistant\n<think>\n")
    assert wrapped.check('Count them: {"n": "two"} is wrong.\n</think>\n\n{"n": 2}') is None
    assert wrapped.check('Count.\n</think>\n\n{"n": "two"}') is not None
    assert wrapped.check('{"n": 3}') is None  # no thinking in the answer: all of it is checked
