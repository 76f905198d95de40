"""Which tokens each llama.cpp sequence slot holds in the KV cache, for prefix reuse and eviction.

Pure bookkeeping: it returns the cache operations to run and never touches llama.cpp itself.
Finished sequences leave their KV resident ("idle" slots); a new request starts from the slot with
the longest common prefix, or shares a busy slot's prefix cells by copy (no data moves in a unified
cache). Idle slots are evicted least-recently-used when cells or slots run short.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count
from typing import ClassVar, Iterable, Union

from ..sequence import Sequence


@dataclass(frozen=True, slots=True)
class Remove:
    """Drop positions [start, end) of `seq_id` (end -1: to the end)."""

    kind: ClassVar[str] = "remove"
    seq_id: int
    start: int = 0
    end: int = -1


@dataclass(frozen=True, slots=True)
class Copy:
    """Share `src`'s cells over [start, end) into `seq_id` (no data moves in a unified cache)."""

    kind: ClassVar[str] = "copy"
    seq_id: int
    src: int
    start: int = 0
    end: int = -1


@dataclass(frozen=True, slots=True)
class Import:
    """Load `seq.kv_import` (state handed over by another worker) into `seq_id`."""

    kind: ClassVar[str] = "import"
    seq_id: int
    seq: Sequence


KVOp = Union[Remove, Copy, Import]


@dataclass(slots=True)
class Slot:
    id: int
    tokens: list[int] = field(default_factory=list)  # resident tokens when idle
    owner: Sequence | None = None
    last_used: int = 0

    @property
    def resident(self) -> list[int]:
        return self.owner.tokens[: self.owner.num_computed] if self.owner else self.tokens

    @property
    def num_resident(self) -> int:
        return self.owner.num_computed if self.owner else len(self.tokens)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class KVSlots:
    """The slot table of one context: n_slots sequence ids over n_ctx cells."""

    def __init__(self, n_slots: int, n_ctx: int) -> None:
        self.slots = [Slot(i) for i in range(n_slots)]
        self.n_ctx = n_ctx
        self._clock = count(1)

    def used_cells(self) -> int:
        """An upper bound: cells shared by copy are counted once per slot."""
        return sum(s.num_resident for s in self.slots)

    def idle(self) -> list[Slot]:
        return sorted((s for s in self.slots if s.owner is None), key=lambda s: s.last_used)

    def has_free_slot(self) -> bool:
        return any(s.owner is None for s in self.slots)

    def best_prefix(self, tokens: list[int]) -> tuple[Slot | None, int]:
        """The slot sharing the longest prefix with `tokens`; at least one token is left to compute."""
        best, best_len = None, 0
        limit = len(tokens) - 1  # the last prompt token must be computed to get logits
        for slot in self.slots:
            n = min(common_prefix(slot.resident, tokens), limit)
            if n > best_len:
                best, best_len = slot, n
        return best, best_len

    def assign(self, seq: Sequence) -> tuple[list[KVOp], int] | None:
        """Give `seq` a slot, reusing the longest resident prefix. None when no slot is available
        or its new tokens would not fit even after evicting every other idle slot."""
        idle = self.idle()
        if not idle:
            return None
        source, reused = self.best_prefix(seq.tokens)
        handed = seq.kv_import.num_tokens if seq.kv_import is not None else 0
        imported = handed > reused  # state computed elsewhere replaces any shorter local prefix
        if imported:
            source, reused = None, handed
        empty = next((s for s in idle if not s.tokens), None)
        in_place = source is not None and source.owner is None
        if in_place and not (empty and len(source.tokens) - reused > reused):
            plans = [source]
        else:
            # An empty slot before the least recently used one: resident prefixes stay for their
            # next turn. That includes a source that reusing in place would cut by more than it
            # keeps (an agent alternating prompts with and without tools shares a few tokens)...
            # unless keeping it leaves no room: then it is cut in place after all, or the request
            # would wait for cells that nothing is going to free.
            plans = [empty or idle[0], *([source] if in_place else [])]
        target = next((t for t in plans if self._fits(seq, t, source, idle)), None)
        if target is None:
            return None
        ops: list[KVOp] = []
        if target is source:
            ops.append(Remove(target.id, reused))
        else:
            if target.tokens:
                ops.append(Remove(target.id))
            if imported:
                ops.append(Import(target.id, seq))
            elif source is not None and reused:
                ops.append(Copy(target.id, source.id, 0, reused))
        target.tokens = []
        target.owner = seq
        target.last_used = next(self._clock)
        seq.slot = target.id
        seq.num_computed = reused
        return ops, reused

    def _fits(self, seq: Sequence, target: Slot, source: Slot | None, idle: list[Slot]) -> bool:
        """Whether `seq` fits in `target` (its prefix shared with `source`, kept) once every other idle
        slot is evicted. Copied cells count twice, as in used_cells(): an upper bound."""
        evictable = sum(len(s.tokens) for s in idle if s is not target and s is not source)
        return self.used_cells() - len(target.tokens) - evictable + len(seq.tokens) <= self.n_ctx

    def release(self, seq: Sequence, keep: bool) -> list[KVOp]:
        """The sequence is done with its slot; keep its KV for later prefix reuse, or drop it."""
        slot = self.slots[seq.slot]
        assert slot.owner is seq
        slot.owner = None
        seq.slot = None
        slot.last_used = next(self._clock)
        if keep:
            slot.tokens = seq.tokens[: seq.num_computed]
            return []
        slot.tokens = []
        return [Remove(slot.id)]

    def evict(self, need: int, protect: Iterable[int] = ()) -> list[KVOp]:
        """Drop idle slots, least recently used first, until `need` more cells are free."""
        ops: list[KVOp] = []
        protected = set(protect)
        for slot in self.idle():
            if self.n_ctx - self.used_cells() >= need:
                break
            if slot.tokens and slot.id not in protected:
                ops.append(Remove(slot.id))
                slot.tokens = []
        return ops
