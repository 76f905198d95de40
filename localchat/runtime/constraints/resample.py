"""Answers that must pass a check their grammar cannot express (a schema's uniqueItems, number
bounds, not...): the finished answer is checked, and a failing one resampled from the failing value
on, keeping the text before it, until it passes or the attempts run out (then an error naming the
keyword). Engine.submit wraps every request whose grammar carries a check, so each caller (the
API's protocols, the terminal) gets only answers that pass.

A resample keeps what came before the failing value as forced text (read with the prompt, fed to
the grammar) and samples on from there: twice from the failing value itself, then twice from the
value holding it, and so on out to the whole answer (counted for each place that fails). A greedy
request resamples at a temperature with fixed seeds, so it stays reproducible. While the check is
pending nothing goes out when the grammar leaves part of the schema to it (`hold`); a grammar that
enforces all of it streams as usual, and the check only guards against a converter bug.
An answer that max_tokens ends is not checked: it is cut, as without a check.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, Iterator, Protocol

from ...errors import RequestError
from ..events import Done, Event, Failed, PrefillProgress, Stats, TextDelta, collect

if TYPE_CHECKING:
    from ..events import Result, Stream
    from ..sampling import SamplingParams
    from .schema_check import Violation

MAX_RESAMPLES = 8
# A resample draws from the model's whole distribution under the grammar (no top-k, top-p or min-p:
# they would cut away the alternatives to a value the model is sure of), at least this warm (a
# greedy resample would write the same value again), a little warmer with each attempt.
RESAMPLE_TEMPERATURE = 0.8
WARMER = 0.15
SEED_STEP = 7919


class Request(Protocol):
    """What a resample changes of a request (engine.py's Request, which submits through here)."""

    forced: str
    sampling: "SamplingParams"


class AnswerCheck(Protocol):
    hold: bool
    param: str

    def __call__(self, text: str) -> "Violation | None": ...


class SchemaUnmetError(RequestError):
    """The answer kept breaking a schema keyword the grammar leaves to the check."""


def checked(submit: Callable[["Request"], "Stream"], request: "Request") -> "Stream | Resampled":
    """Submit `request`; where its grammar carries a check, the stream that gives only passing answers."""
    stream = submit(request)
    check = request.sampling.grammar.check if request.sampling.grammar is not None else None
    return Resampled(submit, request, stream, check) if check is not None else stream


class Resampled:
    """A Stream (the same interface) whose answer passes `check`."""

    def __init__(self, submit: Callable[["Request"], "Stream"], request: "Request", first: "Stream",
                 check: AnswerCheck) -> None:
        self.id = first.id
        self.finished = False
        self._submit = submit
        self._request = request
        self._current = first
        self._check = check
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True
        self._current.cancel()

    def result(self) -> "Result":
        return collect(self)

    def __iter__(self) -> Iterator[Event]:
        try:
            yield from self._events()
        finally:
            self.finished = True

    def _events(self) -> Iterator[Event]:
        hold = self._check.hold
        given = self._request.forced  # the caller's own beginning: checked with the rest, never resampled
        deltas: list[TextDelta] = []
        stats: list[Stats] = []
        found: list[Violation] = []
        while True:
            done = None
            for event in self._current:
                if isinstance(event, TextDelta):
                    deltas.append(event)
                    if not hold:
                        yield event
                elif isinstance(event, Stats):
                    stats.append(event)
                elif isinstance(event, Done):
                    done = event
                elif isinstance(event, Failed):
                    yield event
                    return
                elif not found or not isinstance(event, PrefillProgress):
                    yield event
            text = given + "".join(d.text for d in deltas)
            violation = self._check(text) if done.finish_reason == "stop" and not self._cancelled else None
            if violation is None:
                break
            found.append(violation)
            if not hold or len(found) > MAX_RESAMPLES:
                yield Failed(self._unmet(violation, len(found)))
                return
            # Twice from the failing value, then twice from the one holding it...: counted per place.
            level = (sum(v.where == violation.where for v in found) - 1) // 2
            cut = max(len(given), violation.offsets[min(level, len(violation.offsets) - 1)])
            deltas = _cut(deltas, cut - len(given))
            self._current = self._submit(self._again(text[:cut], len(found)))
            if self._cancelled:
                self._current.cancel()
        if hold:
            yield from deltas
        if stats:
            yield _merged(stats, [v.keyword for v in found])
        yield done

    def _again(self, forced: str, attempt: int) -> "Request":
        params = self._request.sampling
        greedy = params.temperature <= 0.0
        seed = None if params.seed is None and not greedy else ((params.seed or 0) + attempt * SEED_STEP) % 2**32
        warmth = min(2.0, max(params.temperature, RESAMPLE_TEMPERATURE) + WARMER * (attempt - 1))
        sampling = dataclasses.replace(params, temperature=warmth, seed=seed, top_k=0, top_p=1.0, min_p=0.0)
        return dataclasses.replace(self._request, forced=forced, sampling=sampling)

    def _unmet(self, violation: "Violation", tries: int) -> SchemaUnmetError:
        return SchemaUnmetError(
            f"the answer broke the JSON schema keyword '{violation.keyword}' at {violation.where} "
            f"({violation.message}) in {tries} tr{'y' if tries == 1 else 'ies'}; this model does not meet that "
            "keyword here: loosen it, or check the value after the answer.", self._check.param)


def _cut(deltas: list[TextDelta], offset: int) -> list[TextDelta]:
    """The deltas of the text's first `offset` characters; the one the cut falls in keeps its head
    and the log-probabilities of the tokens wholly inside it."""
    kept, seen = [], 0
    for delta in deltas:
        if seen + len(delta.text) <= offset:
            kept.append(delta)
            seen += len(delta.text)
            continue
        head = delta.text[:offset - seen]
        if head:
            room, logprobs = len(head.encode("utf-8")), []
            for entry in delta.logprobs:
                room -= len(entry.bytes)
                if room < 0:
                    break
                logprobs.append(entry)
            kept.append(TextDelta(head, logprobs))
        break
    return kept


def _merged(stats: list[Stats], keywords: list[str]) -> Stats:
    """One request's numbers over its attempts: tokens sampled in all, time from the first submit."""
    first, again = stats[0], sum(s.total_ms for s in stats[1:])
    return dataclasses.replace(first, completion_tokens=sum(s.completion_tokens for s in stats),
                               total_ms=first.total_ms + again, resampled=tuple(keywords), resample_ms=again)

