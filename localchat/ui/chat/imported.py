"""What an imported chat's messages keep: only what the window shows of them, each field of the type
the window reads; the fields the engine reads are rebuilt from what is shown, never taken from the file.

An export's stats were a free-form object, kept as they came: odd types (`left_out: "many"`,
`versions: 5`) imported fine and then broke the window each time the chat opened, and a hidden
`prompt` on a turn was what the model read in place of the text shown. Here a field of the wrong type
is dropped (the turn shows without it), a group of numbers is kept whole or not at all, and a turn's
prompt is rebuilt from the passages its reply shows (a document read whole was not shown: the
imported turn is its question alone).
"""

from __future__ import annotations

from typing import Any, Callable

from .tool_cards import checked_steps, notes_of

MAX_PASSAGES = 256
MAX_BRANCHES = 256
_NUMBERS = ("prompt_tokens", "cached_tokens", "completion_tokens", "ttft_ms", "tokens_per_s", "n_ctx")
_FINISHES = ("stop", "length", "cancelled", "error", "tool_calls")


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0  # `type is`: a bool is no count


def _number(value: Any) -> bool:
    return type(value) in (int, float) and value == value and 0 <= value < 1e15  # NaN fails value == value


def _text(value: Any) -> bool:
    return isinstance(value, str)


def passages_of(value: Any) -> list[dict[str, str]] | None:
    """The cited passages as the window shows them (document, place, text), or None if they are not that."""
    if not isinstance(value, list) or len(value) > MAX_PASSAGES:
        return None
    kept = []
    for p in value:
        if not isinstance(p, dict) or not all(_text(p.get(k)) for k in ("document", "label", "text")):
            return None
        kept.append({k: p[k] for k in ("document", "label", "text")})
    return kept


def reply_stats(stats: dict[str, Any], message: Callable[[Any], tuple[str, str, dict[str, Any]] | None],
                depth: int = 0) -> dict[str, Any]:
    """An assistant turn's stats: its numbers (all of the footer's or none), how it ended, its thinking, what
    it read, how many early turns it left out, and its other versions (each checked as this one, with what
    followed it when it was left checked by `message`: None, not a message)."""
    kept: dict[str, Any] = {}
    if all(_number(stats.get(k)) for k in _NUMBERS) and all(_count(stats.get(k)) for k in _NUMBERS[:3]):
        kept |= {k: stats[k] for k in _NUMBERS}
        if _number(stats.get("total_s")):
            kept["total_s"] = stats["total_s"]
        if _number(stats.get("spec_acceptance")) and _text(stats.get("spec_drafter")):
            kept |= {"spec_acceptance": stats["spec_acceptance"], "spec_drafter": stats["spec_drafter"]}
    if stats.get("finish_reason") in _FINISHES:
        kept["finish_reason"] = stats["finish_reason"]
    if _text(stats.get("error")) and stats["error"]:
        kept["error"] = stats["error"]
    if _text(stats.get("thinking")) and stats["thinking"]:  # shown above the answer, as text
        kept["thinking"] = stats["thinking"]
        if _number(stats.get("thought_s")):
            kept["thought_s"] = stats["thought_s"]
        if _count(stats.get("thinking_tokens")):
            kept["thinking_tokens"] = stats["thinking_tokens"]
    _shown(stats, kept)
    steps = checked_steps(stats.get("tool_steps"))  # shown as they ended: an import never runs a tool
    if steps:
        kept["tool_steps"] = steps
    if notes_of(stats):
        kept["tool_notes"] = notes_of(stats)
    if _count(stats.get("left_out")):
        kept["left_out"] = stats["left_out"]
    versions = stats.get("versions")
    if depth == 0 and isinstance(versions, list) and 0 < len(versions) <= MAX_BRANCHES \
            and _count(stats.get("version")) and stats["version"] < len(versions) \
            and all(isinstance(v, dict) and _text(v.get("content")) and isinstance(v.get("stats"), dict)
                    for v in versions):
        kept["versions"] = [{"content": v["content"], "stats": reply_stats(v["stats"], message, depth + 1)}
                            | _after(v.get("after"), message) for v in versions]
        kept["version"] = stats["version"]
    return kept


def _after(value: Any, message: Callable[[Any], tuple[str, str, dict[str, Any]] | None]) -> dict[str, Any]:
    """A version's "after" (the turns that followed it when it was left), kept as a branch is (_turns)."""
    turns = _turns(value, message)
    return {"after": turns} if turns else {}


def _turns(value: Any, message: Callable[[Any], tuple[str, str, dict[str, Any]] | None]) -> list[dict] | None:
    """A branch's (or a version's "after") messages, each checked by `message`: kept only whole and only if they
    start with a question, else None."""
    turns = [message(m) for m in value] if isinstance(value, list) and value else None
    if not turns or any(t is None for t in turns) or turns[0][0] != "user":
        return None
    return [{"role": r, "content": c, "stats": s} for r, c, s in turns]  # type: ignore[misc]


def user_stats(content: str, stats: dict[str, Any],
               message: Callable[[Any], tuple[str, str, dict[str, Any]] | None]) -> dict[str, Any]:
    """A user turn's stats: what its reply read (and the prompt rebuilt from it), and its branches, each
    branch's messages checked by `message` (None: not a message)."""
    kept: dict[str, Any] = {}
    _shown(stats, kept)
    if stats.get("mode") in ("whole", "retrieved"):
        kept["mode"] = stats["mode"]
    if kept.get("passages"):
        kept["prompt"] = prompt_from(content, kept["passages"])
    branches, branch = stats.get("branches"), stats.get("branch")
    if isinstance(branches, list) and 1 < len(branches) <= MAX_BRANCHES and _count(branch) \
            and branch < len(branches) and branches[branch] is None:
        checked: list[Any] = []
        for i, b in enumerate(branches):
            if i == branch:
                checked.append(None)
                continue
            turns = _turns(b, message)
            if turns is None:
                return kept  # a branch that is not one: the turn shows without its branches
            checked.append(turns)
        kept |= {"branches": checked, "branch": branch}
    return kept


def prompt_from(question: str, passages: list[dict[str, str]]) -> str:
    """What the model reads for a turn whose reply cites these passages: them, then the question."""
    context = "\n\n".join(f"[{p['document']}, {p['label']}]\n{p['text']}" for p in passages)
    return f"{context}\n\nAnswer from the passages above.\n\nQuestion: {question}"


def _shown(stats: dict[str, Any], kept: dict[str, Any]) -> None:
    """What a turn shows of the documents its reply read: the summary and the cited passages."""
    if _text(stats.get("included")) and stats["included"]:
        kept["included"] = stats["included"]
    passages = passages_of(stats.get("passages"))
    if passages:
        kept["passages"] = passages
