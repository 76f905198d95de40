"""What a target step costs on this machine, learned from the steps themselves: the speculator prices
drafts with it (speculative.py) and the step meter feeds it (step_meter.py)."""

from __future__ import annotations


def kv_read(pos: int, n: int) -> int:
    """Cached tokens that `n` tokens starting at position `pos` attend to, together."""
    return n * pos + n * (n - 1) // 2


# A single-token step that attends to more cached tokens than this measures what the KV adds.
SHORT_KV = 64


class StepCosts:
    """Measured seconds of one target step: a part that grows with its width in tokens (the weights'
    products, by width, timed at start with little KV and refined by every step wider than one) plus
    one that grows with the cached tokens its rows attend to (`per_kv`, learned from plain single-token
    steps, the commonest), both averaged as they come (EMA).

    The second part decides late in a long prompt: every drafted row reads the whole KV, so at about
    a thousand tokens of context a 9-token step of the 135M default model costs ~4.8 single steps where
    the start-up timing (a few tokens of KV) measured ~3; speculation priced on the start-up table drafted
    where it could not pay."""

    def __init__(self, seed_ms: dict[int, float] | None = None) -> None:
        """`seed_ms`: width -> milliseconds measured earlier on this machine (the wizard's table)."""
        self._seconds: dict[int, float] = {int(w): ms / 1000 for w, ms in (seed_ms or {}).items() if ms > 0}
        self.per_kv = 0.0  # seconds per cached token a step's tokens attend to
        self._kv_samples = 0

    def record(self, width: int, seconds: float, kv: int = 0) -> None:
        """A step of `width` tokens took `seconds`; its tokens attended to `kv` cached tokens in all."""
        if width == 1 and kv > SHORT_KV and self.known():
            # A plain step deep in a chat (most steps are): what the KV adds, over the width's part.
            sample = max(seconds - self._base(1), 0.0) / kv
            self.per_kv = sample if not self._kv_samples else 0.8 * self.per_kv + 0.2 * sample
            self._kv_samples += 1
            return
        # Any other step refines its width's part, with what the KV adds taken out: a start-up timing
        # that caught a hiccup does not stay.
        base = max(seconds - self.per_kv * kv, 1e-6)
        prev = self._seconds.get(width)
        self._seconds[width] = base if prev is None else 0.8 * prev + 0.2 * base

    def known(self) -> bool:
        return len(self._seconds) >= 2

    def cost(self, width: int, kv: int = 0) -> float:
        """Seconds for a step of `width` tokens attending to `kv` cached tokens in all."""
        return self._base(width) + self.per_kv * kv

    def _base(self, width: int) -> float:
        """The width's part: measured, else interpolated or extrapolated."""
        if width in self._seconds:
            return self._seconds[width]
        widths = sorted(self._seconds)
        lower = [w for w in widths if w < width]
        upper = [w for w in widths if w > width]
        if lower and upper:
            a, b = lower[-1], upper[0]
        elif len(lower) >= 2:
            a, b = lower[-2], lower[-1]
        elif len(upper) >= 2:
            a, b = upper[0], upper[1]
        else:
            return next(iter(self._seconds.values()), 0.0)
        slope = (self._seconds[b] - self._seconds[a]) / (b - a)
        return max(self._seconds[a] + slope * (width - a), 1e-6)

    def table(self) -> dict[int, float]:
        return dict(sorted(self._seconds.items()))
