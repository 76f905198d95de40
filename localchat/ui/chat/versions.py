"""Versions kept in a conversation: the answers of one turn (Regenerate) and the branches of an edited user turn.

An answer's versions live in its stats ("versions", "version": the one shown; a version left keeps what followed
it as "after"). An edited user turn keeps
each way the chat went from it in its stats: "branches" holds, per branch, the messages from that turn to
the end as they were when the user left it, and "branch" says which one is live; the live branch's slot
is None, since the messages themselves are its only copy (one fact in one place).
"""

from __future__ import annotations

from typing import Any

from .store import Message, Store

BRANCH_KEYS = ("branches", "branch")  # what a user turn's stats say about its branches
VERSION_KEYS = ("versions", "version")  # what an answer's stats say about its versions


def drop_reply(store: Store, conv_id: str) -> list[dict[str, Any]]:
    """Remove the answer after the last user turn, to answer it again; returns the answers so far."""
    conv = store.get(conv_id)
    assert conv is not None
    last_user = max(i for i, m in enumerate(conv.messages) if m.role == "user")
    reply = conv.messages[last_user + 1] if last_user + 1 < len(conv.messages) else None
    store.truncate(conv_id, last_user + 1)
    if reply is None:
        return []
    return reply.stats.get("versions") or [{"content": reply.content, "stats": reply.stats}]


def show_version(store: Store, conv_id: str, index: int, step: int) -> bool:
    """Show the previous (-1) or next (+1) version of the answer at message `index`; False if there is none.
    The chat continues from the version shown: what followed the version left is kept with it ("after", as a
    branch keeps its turns) and what followed the chosen one comes back."""
    found = _stepped(store, conv_id, index, "assistant", VERSION_KEYS, step)
    if found is None:
        return False
    messages, kept, current, chosen = found
    reply = messages[index]
    own = {k: v for k, v in reply.stats.items() if k not in VERSION_KEYS}  # a Continue may have grown it
    kept[current] = {"content": reply.content, "stats": own, "after": _plain(messages[index + 1:])}
    store.splice(conv_id, index, shown_version(kept, chosen))
    return True


def shown_version(kept: list[dict[str, Any]], chosen: int) -> list[Message]:
    """Version `chosen` of `kept` as the answer shown, followed by what followed it when it was left; its entry
    keeps no "after" while shown (the messages themselves are that)."""
    entry = kept[chosen]
    kept[chosen] = {"content": entry["content"], "stats": entry["stats"]}
    own = entry["stats"] | ({"versions": kept, "version": chosen} if len(kept) > 1 else {})
    return [Message("assistant", entry["content"], own)] + _messages(entry.get("after") or [])


def _stepped(store: Store, conv_id: str, index: int, role: str, keys: tuple[str, str],
             step: int) -> tuple[list[Message], list[Any], int, int] | None:
    """For a ‹ or ›: the chat's messages, the list message `index` (of `role`) keeps under `keys` (the list's
    and the shown one's), the one shown and the one `step` away; None where there is nowhere to go."""
    conv = store.get(conv_id)
    if conv is None or not 0 <= index < len(conv.messages) or conv.messages[index].role != role:
        return None
    stats = conv.messages[index].stats
    kept, current = list(stats.get(keys[0]) or []), stats.get(keys[1], 0)
    chosen = min(max(current + step, 0), len(kept) - 1)
    if len(kept) < 2 or chosen == current:
        return None
    return conv.messages, kept, current, chosen


def _plain(messages: list[Message]) -> list[dict[str, Any]]:
    return [{"role": m.role, "content": m.content, "stats": m.stats} for m in messages]


def _messages(kept: list[dict[str, Any]]) -> list[Message]:
    return [Message(m["role"], m["content"], m["stats"]) for m in kept]


def _tail(messages: list[Message]) -> list[dict[str, Any]]:
    """A branch as kept: the turn (without its own branch bookkeeping) and everything after it."""
    first, *rest = messages
    kept = [{"role": first.role, "content": first.content,
             "stats": {k: v for k, v in first.stats.items() if k not in BRANCH_KEYS}}]
    return kept + _plain(rest)


def fork(store: Store, conv_id: str, index: int) -> tuple[dict[str, Any], list[Message]]:
    """Cut the conversation at user turn `index` to put an edited turn there; the old branch is kept.

    Returns the stats the edited turn carries (its branches, the new one live) and the messages cut,
    to put back if the edited turn is refused.
    """
    conv = store.get(conv_id)
    assert conv is not None and conv.messages[index].role == "user"
    turn = conv.messages[index]
    branches = list(turn.stats.get("branches") or [None])
    branches[turn.stats.get("branch", 0)] = _tail(conv.messages[index:])
    store.truncate(conv_id, index)
    return {"branches": [*branches, None], "branch": len(branches)}, conv.messages[index:]


def show_branch(store: Store, conv_id: str, index: int, step: int) -> bool:
    """Make the previous (-1) or next (+1) branch of user turn `index` the live one; False if there is none."""
    found = _stepped(store, conv_id, index, "user", BRANCH_KEYS, step)
    if found is None:
        return False
    messages, branches, current, chosen = found
    branches[current] = _tail(messages[index:])
    first, *rest = branches[chosen]
    branches[chosen] = None
    turn = Message("user", first["content"], first["stats"] | {"branches": branches, "branch": chosen})
    store.splice(conv_id, index, [turn] + _messages(rest))
    return True


def stepper(kind: str, index: int, shown: int, count: int) -> str:
    """"‹ 2/3 ›" under message `index`: its answer versions (kind "version") or its branches (kind "branch"),
    one control for both. The arrows are buttons (keyboard reachable; their title is their name, which the page
    script gives screen readers as aria-label: the chat's sanitizer keeps no aria- or data- attribute) whose value
    the page script sends as a request ("version:I:-1"); one with nowhere to go is disabled."""
    noun = "answer" if kind == "version" else "branch"

    def arrow(step: int, sign: str, way: str) -> str:
        off = "" if 0 <= shown + step < count else " disabled"
        return (f'<button type="button" class="lc-step" value="{kind}:{index}:{step}" '
                f'title="{way} {noun}"{off}>{sign}</button>')

    return f'<span class="lc-stepper">{arrow(-1, "‹", "previous")} {shown + 1}/{count} {arrow(1, "›", "next")}</span>'


def branch_marker(index: int, stats: dict[str, Any]) -> str:
    """"‹ 2/3 ›" under an edited user turn (its branches), or "" for a turn never edited."""
    branches = stats.get("branches") or []
    if len(branches) < 2:
        return ""
    return stepper("branch", index, stats.get("branch", 0), len(branches))


def version_marker(index: int, stats: dict[str, Any]) -> str:
    """"‹ 2/3 ›" under a regenerated answer (its versions), or "" for an answer written once."""
    kept = stats.get("versions") or []
    if len(kept) < 2:
        return ""
    return stepper("version", index, stats.get("version", 0), len(kept))


def delete_button(target: str, label: str) -> str:
    """A message's Delete ("turn:I", "version:I"): the page script asks beside it first, then sends
    "delete-turn:I" or "delete-version:I" (removal.py does it)."""
    return (f'<button type="button" class="lc-delete-message" value="delete-{target}" '
            f'title="{label}">Delete</button>')


def tools(*controls: str) -> str:
    """The controls under a message on one line ("" with none): the page script knows the line by its class (an
    edit box leaves it out)."""
    shown = " ".join(c for c in controls if c)
    return f'<span class="lc-tools">{shown}</span>' if shown else ""
