"""Text for the chat window: model output made inert, stats and progress lines, the status panel."""

from __future__ import annotations

import bisect
import html
import os
import re
from pathlib import Path
from typing import Any, Iterator

from ...runtime.events import Stats
from ...runtime.overflow import left_out_note
from ...units import size_text
from .tool_cards import card_html, notes_of, steps_of

_MD_SPECIAL = re.compile(r"([\\`*_\[\]#|])")
_BACKTICKS = re.compile(r"`+")


def inert(text: str) -> str:
    """Markdown that shows model output as text: no HTML element, no image, nothing fetched.

    Code (fenced blocks, inline spans) renders its content as text already; escaping it too
    would show "&lt;" in code, so code is found the way CommonMark finds it, in one linear pass.
    Where this scanner and the browser's Markdown could disagree, it errs towards escaping.
    """
    return "".join(part if code else _defuse(part) for code, part in code_parts(text))


def _defuse(text: str) -> str:
    # An image would be fetched as soon as it is shown (a remote one tells its server what the
    # page holds); "\\![alt](url)" shows "!" and a link the user may choose to follow.
    return html.escape(text, quote=False).replace("![", "\\![")


def from_inert(shown: str) -> str:
    """The text `inert` was given, from what it made (an edit box starts with what the chat shows):
    only what it escaped is undone, so "&lt;" typed in code stays as typed."""
    def restore(part: str) -> str:
        return part.replace("\\![", "![").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return "".join(part if code else restore(part) for code, part in code_parts(shown))


def code_parts(text: str) -> Iterator[tuple[bool, str]]:
    """(is_code, text) pieces of Markdown, in order; joined they give `text` back."""
    lines = text.split("\n")
    prose: list[str] = []
    i = 0
    while i < len(lines):
        fence = _fence(lines[i])
        if fence is None:
            prose.append(lines[i])
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if _closes(lines[j], fence)), len(lines) - 1)
        if prose:
            yield from _inline_parts("\n".join(prose) + "\n")
            prose = []
        yield True, "\n".join(lines[i:end + 1]) + ("\n" if end + 1 < len(lines) else "")
        i = end + 1
    if prose:
        yield from _inline_parts("\n".join(prose))


def _fence(line: str) -> str | None:
    """The fence a line opens (a run of 3+ backticks or tildes after at most 3 spaces), or None."""
    indent = len(line) - len(line.lstrip(" "))
    body = line[indent:]
    if indent > 3 or not body.startswith(("```", "~~~")):
        return None
    run = len(body) - len(body.lstrip(body[0]))
    if body[0] == "`" and "`" in body[run:]:  # a backtick fence's info string holds no backtick
        return None
    return body[:run]


def _closes(line: str, fence: str) -> bool:
    body = line.lstrip(" ")
    return (len(line) - len(body) <= 3 and body.startswith(fence)
            and not body.rstrip(" \t").lstrip(fence[0]))


def _inline_parts(text: str) -> Iterator[tuple[bool, str]]:
    """Code spans within prose: a run of N backticks up to the next run of exactly N on the same line."""
    for line in text.splitlines(keepends=True):
        runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(line)]
        by_length: dict[int, list[int]] = {}
        for index, (start, end) in enumerate(runs):
            by_length.setdefault(end - start, []).append(index)
        done, k = 0, 0
        while k < len(runs):
            start, end = runs[k]
            slashes = 0
            while start - slashes > done and line[start - slashes - 1] == "\\":
                slashes += 1
            start += slashes % 2  # a backslash makes the first backtick literal (outside code only)
            candidates = by_length.get(end - start, [])
            after = bisect.bisect_right(candidates, k)
            if end == start or after == len(candidates):
                k += 1
                continue
            close = candidates[after]
            if start > done:
                yield False, line[done:start]
            done = runs[close][1]
            yield True, line[start:done]
            k = close + 1
        if done < len(line):
            yield False, line[done:]


def plain(text: str) -> str:
    """Text shown literally inside markdown (file names, summaries)."""
    return _MD_SPECIAL.sub(r"\\\1", html.escape(text, quote=False))


def stats_dict(stats: Stats | None, n_ctx: int) -> dict[str, Any]:
    """The numbers kept with a reply in the store."""
    if stats is None:
        return {}
    numbers = stats.to_dict()
    keep = ("prompt_tokens", "cached_tokens", "completion_tokens", "ttft_ms", "tokens_per_s")
    out: dict[str, Any] = {key: numbers[key] for key in keep} | {"n_ctx": n_ctx}
    spec = numbers.get("speculation")
    if spec and spec["drafted"]:  # stored under these names since the first release
        out["spec_acceptance"], out["spec_drafter"] = spec["acceptance"], spec["drafter"]
    return out


def stats_line(stats: dict[str, Any]) -> str:
    """"smollm2-135m · TTFT 80 ms · 42 tokens at 140.2 tokens/s · 1.3 s in all · context 312 / 8,192" for under a
    reply (a thinking model's tokens told apart: "30 thinking + 12 answer tokens"), the model's name first when it was kept with the reply. The rate is the writing's alone, and the time
    from Send to the last token stands apart from it: "11 tokens in 55.8 s · 8.2 tokens/s" read as a contradiction
    when most of the wait was reading the prompt."""
    items = [str(stats["model"])] if stats.get("model") else []  # which model wrote it, as the window named it
    if stats.get("completion_tokens"):
        items += [f"TTFT {stats['ttft_ms']:,.0f} ms",
                  f"{tokens_written(stats)} at {stats['tokens_per_s']:.1f} tokens/s"]
    elif stats.get("finish_reason") == "stop" and "prompt_tokens" in stats:  # ended at once: no rate, but read
        items.append("0 tokens")
    else:  # stopped before the first token: no numbers to speak of
        return ""
    if "total_s" in stats:
        items.append(f"{stats['total_s']:.1f} s in all")
    if "spec_acceptance" in stats:
        items.append(f"speculative acceptance {stats['spec_acceptance']:.0%} ({stats['spec_drafter']})")
    if stats.get("cached_tokens"):
        items.append(f"{stats['cached_tokens']:,} prompt tokens reused")
    used = stats["prompt_tokens"] + stats["completion_tokens"]
    items.append(f"context {used:,} / {stats['n_ctx']:,}")
    return " · ".join(items)


def tokens_written(stats: dict[str, Any]) -> str:
    """"42 tokens", or a thinking model's "120 thinking + 40 answer tokens" (the rate stays the whole writing's)."""
    total, thought = stats["completion_tokens"], min(int(stats.get("thinking_tokens") or 0), stats["completion_tokens"])
    return f"{thought:,} thinking + {total - thought:,} answer tokens" if thought else f"{total:,} tokens"


def finish_note(finish_reason: str) -> str:
    """What the footer says about how a reply ended ("" for a natural end)."""
    return {"cancelled": "stopped", "length": "cut at max tokens"}.get(finish_reason, "")


def reply_note(stats: dict[str, Any]) -> str:
    """The footer's note: how the reply ended, and the early turns left out for it."""
    notes = (finish_note(stats.get("finish_reason", "")), left_out_note(int(stats.get("left_out", 0))))
    return " · ".join(x for x in notes if x)


def reply_markdown(answer: str, stats: dict[str, Any], included: str = "", note: str = "",
                   passages: list[dict[str, str]] | None = None, thinking_now: bool = False) -> str:
    """A reply as shown: a thinking model's thinking (open while it thinks, then closed), the answer, then
    what documents it read (each retrieved passage opens to its text), then its numbers."""
    thought = stats.get("thinking")
    lines = [f"*Tools left out: {plain('; '.join(notes_of(stats)))}*"] if notes_of(stats) else []
    lines += [part for step in steps_of(stats) for part in step_parts(step)]  # the turns that called tools first
    lines += [thinking_html(thought, thinking_now, stats.get("thought_s"))] if thought else []
    lines.append(inert(answer) if answer else ("" if thinking_now else no_answer(stats.get("finish_reason"))))
    if included:
        lines.append(f"**Included:** {plain(included)}")
    if passages:
        lines.append("".join(passage_html(p) for p in passages))
    footer = " · ".join(x for x in (note, stats_line(stats)) if x)
    if footer:
        lines.append(f"*{plain(footer)}*")
    return "\n\n".join(lines)


def step_parts(step: dict[str, Any]) -> list[str]:
    """A model turn that called tools, as shown: its thinking, its text, then its calls' cards (tool_cards.py)."""
    parts = [thinking_html(step["thinking"], False, None)] if step.get("thinking") else []
    return parts + ([inert(step["text"])] if step.get("text", "").strip() else []) + [card_html(c) for c in step["cards"]]


def no_answer(finish_reason: str | None) -> str:
    """An answer without text: "…" while it is still to come; once it ended, how it ended with nothing (a "…"
    left there read as an answer still loading)."""
    if not finish_reason:
        return "…"
    if finish_reason == "cancelled":
        return "*No answer: it was stopped before its first word.*"
    if finish_reason == "error":
        return "*No answer: it failed before its first word.*"
    if finish_reason == "length":  # a thinking model's thinking took all of Max tokens
        return "*No answer within Max tokens: Continue goes on, or raise Max tokens and Regenerate.*"
    return "*The model answered nothing: it ended its answer at once. Regenerate asks again; a rephrased " \
           "question may help.*"


def thinking_html(thought: str, now: bool, seconds: float | None) -> str:
    """The thinking as a block that opens: open and "Thinking…" while it streams, then closed, "Thought for
    N s" (escaped, on one Markdown line so the HTML block is not cut)."""
    summary = "Thinking…" if now else (f"Thought for {seconds:.0f} s" if seconds is not None else "Thought")
    text = html.escape(thought).replace("\n", "<br>")
    return (f'<details class="thinking"{" open" if now else ""}><summary>{summary}</summary>'
            f'<div class="thinking-text">{text}</div></details>')


def passage_html(passage: dict[str, str]) -> str:
    """A cited passage that opens in place: its document and place, then its text (escaped, on one
    Markdown line so the HTML block is not cut; line breaks kept as <br>)."""
    place = html.escape(f"{passage['document']} {passage['label']}")
    text = html.escape(passage["text"]).replace("\n", "<br>")
    return f'<details class="passage"><summary>{place}</summary><div class="passage-text">{text}</div></details>'


def prefill_line(done: int, total: int, started: float, first_done: int, now: float) -> str:
    """"Reading the prompt: 1,024 / 4,096 tokens (25%), about 6 s left"."""
    line = f"Reading the prompt: {done:,} / {total:,} tokens ({done / max(total, 1):.0%})"
    elapsed = now - started
    if done > first_done and elapsed > 0.2:
        rate = (done - first_done) / elapsed
        line += f", about {max((total - done) / rate, 0):.0f} s left"
    return line + " — Stop cancels."


BASE_MODEL_NOTE = ("a base model: its file has no chat template, so it was not tuned to chat; it continues "
                   "text rather than answering (an instruct or chat version of it answers)")


def status_markdown(model: str, path: Path, description: str, n_ctx: int, placement: str,
                    speculation: str, devices: str = "", base_model: bool = False, device_memory: str = "") -> str:
    """The status panel: model, file and quant, context, placement (planned, then as llama.cpp did it), memory;
    `base_model`: the file has no chat template (the window uses ChatML's markers, and stops at them);
    `device_memory`: the GPUs' memory read now (residence.memory_text), no row on the CPU."""
    import psutil

    server = psutil.Process(os.getpid())
    rss = server.memory_info().rss
    for child in server.children(recursive=True):  # the model runner holds the model
        try:
            rss += child.memory_info().rss
        except psutil.Error:  # ended meanwhile
            pass
    try:
        size = size_text(path.stat().st_size)
    except OSError:
        size = "?"
    rows = [("Model", model), ("Weights", description), ("File", f"{path.name} ({size})"),
            ("Context", f"{n_ctx:,} tokens"), ("Placement", placement), ("Device", devices or "?"),
            ("Speculation", speculation), ("Memory", f"{size_text(rss)} resident")] \
        + ([("Device memory", device_memory)] if device_memory else []) \
        + ([("Note", BASE_MODEL_NOTE)] if base_model else [])
    return "\n".join(f"- **{k}:** {plain(v)}" for k, v in rows)
