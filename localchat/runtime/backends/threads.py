"""Thread counts that follow a busy machine.

When another program holds a core, llama.cpp's threads wait on each other at every barrier and a
2-thread decode on 2 cores drops to half the speed of 1 thread (measured: 26 vs 55.6 tok/s). A
tuner watches the step times of one kind of step (single tokens, or batches of about one width:
the engine keeps one tuner per width class), tries another count now and then (at once when single
tokens slow down, rarely while they hold steady) and keeps whichever is faster. A trial of prompt
chunks is a whole chunk at another count (seconds, late in a long document), so their tuners try
nothing until the steps at the kept count have paid for it at TRIAL_SHARE; the single tokens' tuner, which
sees other programs come and go first, hints them its new count to try at once (and a new one starts there).
Pure Python: the engine reports step times and applies the counts.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

PROBE_STEPS = 4  # steps run at a trial count before judging it, unless they take longer than:
PROBE_SECONDS = 0.2  # long steps (a prompt chunk) are steady enough to judge on fewer
TRIAL_SHARE = 0.02  # routine trials take at most about this share of the time
MIN_GAIN = 0.05  # a trial count must be this much faster to be kept (steps are noisy)
SLOWDOWN = 1.25  # steps this much slower than their best recent median: look for a better count now
EXPLORE_FIRST_S = 1.0  # wait before the first trial; doubles after each trial that lost, up to:
EXPLORE_MAX_S = 8.0
RECENT = 7  # steps whose median stands for a count


def width_class(width: int) -> int:
    """Steps of comparable cost: 1, 2, 3-4, 5-8, ... tokens."""
    return 1 if width <= 1 else 1 << (width - 1).bit_length()


@dataclass(slots=True)
class _Trial:
    threads: int
    seconds: list[float] = field(default_factory=list)


class ThreadTuner:
    """The thread count for one kind of step."""

    def __init__(self, max_threads: int, now: float = 0.0, react_to_slowdown: bool = True,
                 threads: int | None = None) -> None:
        self.max_threads = max(1, max_threads)
        self.threads = min(threads or self.max_threads, self.max_threads)
        # Single tokens cost about the same step after step, so a slower run of them means other
        # programs took cores; prompt chunks get dearer as the context fills, so they only trial.
        self.react_to_slowdown = react_to_slowdown
        self._recent: dict[int, deque[float]] = {}
        self._best: dict[int, float] = {}
        self._trial: _Trial | None = None
        # Counts to try soon: at start (single tokens: a trial costs a few milliseconds), after a
        # slowdown, a win or a hint.
        self._search = self._candidates() if react_to_slowdown else []
        self._spent = 0.0  # seconds of steps at the kept count since the last trial (prompt chunks)
        self._hinted: int | None = None  # a count hinted during a trial, tried once it is judged
        self._cycle = 0  # which candidate the next routine trial takes
        self._interval = EXPLORE_FIRST_S
        self._next_trial = now + EXPLORE_FIRST_S
        self.changes = 0  # how often the count changed (benchmarks and tests read it)

    def choose(self, now: float) -> int:
        """Threads for the next step."""
        median = self._median(self.threads)
        due = self._search or (now >= self._next_trial and (self.react_to_slowdown or self._paid(median)))
        if self._trial is None and self.max_threads > 1 and due and median is not None:
            if self._search:
                candidate = self._search.pop(0)
            else:
                options = self._candidates()
                candidate = options[self._cycle % len(options)]
                self._cycle += 1
            self._trial = _Trial(candidate)
        return self._trial.threads if self._trial is not None else self.threads

    def record(self, threads: int, seconds: float, now: float) -> None:
        """A step took `seconds` with `threads` threads."""
        trial = self._trial
        if trial is not None and threads == trial.threads:
            trial.seconds.append(seconds)
            if len(trial.seconds) >= PROBE_STEPS or sum(trial.seconds) >= PROBE_SECONDS:
                self._judge(trial, now)
            return
        recent = self._recent.setdefault(threads, deque(maxlen=RECENT))
        recent.append(seconds)
        if threads == self.threads:
            self._spent += seconds
        if threads != self.threads or len(recent) < RECENT:
            return
        median = statistics.median(recent)
        best = self._best.get(threads)
        if best is None or median < best:
            self._best[threads] = median
        elif median > best * SLOWDOWN and not self._search and self.react_to_slowdown:
            # Something took cores: search now, and let this count's figure start afresh so
            # that it is compared as it runs today.
            self._search = self._candidates()
            self._best[threads] = median

    def hint(self, count: int) -> None:
        """Single tokens now run best at `count` (other programs took cores or gave them back): try that
        count next, against this one as it runs from now on (its figures from before would flatter it)."""
        if self._trial is not None:
            self._hinted = count  # tried once the trial under way is judged
            return
        if count != self.threads:
            self._recent.pop(self.threads, None)
            self._best.pop(self.threads, None)
            self._search = [count]

    def _paid(self, median: float | None) -> bool:
        """Whether the steps at the kept count have paid for a trial at TRIAL_SHARE: about PROBE_STEPS
        steps, or fewer that add up to PROBE_SECONDS, priced at the fastest this count has run (a
        slowdown must not put the trial that would find a way out further off)."""
        if median is None:
            return False
        step = min(median, self._best.get(self.threads, median))
        return self._spent * TRIAL_SHARE >= min(PROBE_STEPS * step, max(step, PROBE_SECONDS))

    def _judge(self, trial: _Trial, now: float) -> None:
        self._trial = None
        self._spent = 0.0
        current = self._median(self.threads)
        tried = statistics.median(trial.seconds)
        if current is not None and tried < current * (1 - MIN_GAIN):
            self._recent.pop(self.threads, None)
            self._best.pop(self.threads, None)
            self._recent[trial.threads] = deque(trial.seconds, maxlen=RECENT)
            self.threads = trial.threads
            self.changes += 1
            self._search = self._candidates()  # the best may lie further the same way
            self._interval = EXPLORE_FIRST_S
        elif not self._search:
            self._interval = min(self._interval * 2, EXPLORE_MAX_S)
        self._next_trial = now + max(self._interval, sum(trial.seconds) / TRIAL_SHARE)
        hinted, self._hinted = self._hinted, None
        if hinted is not None:
            self.hint(hinted)

    def _candidates(self) -> list[int]:
        """Counts worth a trial from here, nearest first: a neighbour either way, a few jumps down
        (threads beyond the free cores all stall alike, so one step down can show no gain) and
        all of them (near the top each extra thread gains less than a trial can tell)."""
        n = self.threads
        options = (n - 1, n + 1, n - 2, n // 2, n - 4, self.max_threads)
        seen: list[int] = []
        for c in options:
            if 1 <= c <= self.max_threads and c != n and c not in seen:
                seen.append(c)
        return seen

    def _median(self, threads: int) -> float | None:
        recent = self._recent.get(threads)
        return statistics.median(recent) if recent and len(recent) >= 3 else None
