"""What a request's stream carries, and the stream object itself."""

from __future__ import annotations

import queue
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Iterator, Union

from ..errors import LocalchatError


@dataclass(slots=True)
class TokenLogprob:
    """One sampled token's log-probability under the target model, and the likeliest alternatives
    (text, bytes, log-probability), best first. `bytes` may hold part of a UTF-8 character."""

    token: str
    bytes: bytes
    logprob: float
    top: list[tuple[str, bytes, float]] = field(default_factory=list)


@dataclass(slots=True)
class TextDelta:
    """New text of the answer (always whole UTF-8 characters). With SamplingParams.logprobs set,
    `logprobs` has one entry per token sampled since the previous delta (text held back, such as
    a possible stop string, arrives later with its tokens)."""

    kind: ClassVar[str] = "token"
    text: str
    logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass(slots=True)
class PrefillProgress:
    """Prompt tokens in the KV cache so far, out of the prompt's length."""

    kind: ClassVar[str] = "prefill_progress"
    done: int
    total: int


@dataclass(slots=True)
class Stats:
    """Final numbers of a request."""

    kind: ClassVar[str] = "stats"
    prompt_tokens: int
    cached_tokens: int  # prompt tokens found resident in the KV cache, not recomputed
    completion_tokens: int
    ttft_ms: float
    tokens_per_s: float  # decode rate after the first token
    prefill_tokens_per_s: float
    total_ms: float
    spec: "SpecStats | None" = None
    kv_transfer_ms: float = 0.0  # moving the prompt's KV state: PD split, a state restored from disk
    kv_transfer_bytes: int = 0
    resampled: tuple[str, ...] = ()  # the schema keyword each resample of the answer was for (resample.py)
    resample_ms: float = 0.0  # the time those resamples took

    def to_dict(self) -> dict[str, Any]:
        """The numbers as JSON-ready values, rounded for people (`chat --json`, the API, the store)."""
        out: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens, "ttft_ms": round(self.ttft_ms, 1),
            "tokens_per_s": round(self.tokens_per_s, 1), "prefill_tokens_per_s": round(self.prefill_tokens_per_s, 1),
            "total_ms": round(self.total_ms, 1),
        }
        if self.spec is not None:
            spec = self.spec
            out["speculation"] = {
                "drafter": spec.drafter, "drafted": spec.drafted, "accepted": spec.accepted,
                "acceptance": round(spec.acceptance, 3), "target_passes": spec.target_passes,
                "mean_accepted": round(spec.accepted / spec.target_passes, 2) if spec.target_passes else 0.0,
                "mean_k": round(spec.mean_k, 2), "tokens_per_pass": round(spec.tokens_per_pass, 2),
                "predicted_speedup": round(spec.predicted_speedup, 2) if spec.predicted_speedup is not None else None,
            }
        if self.kv_transfer_bytes:
            out["kv_transfer"] = {"ms": round(self.kv_transfer_ms, 1), "bytes": self.kv_transfer_bytes}
        if self.resampled:
            out["resampled"] = {"keywords": list(self.resampled), "ms": round(self.resample_ms, 1)}
        return out


@dataclass(slots=True)
class SpecStats:
    """What speculation did for one request."""

    drafter: str
    drafted: int
    accepted: int
    target_passes: int  # target steps that carried drafts
    mean_k: float
    tokens_per_pass: float  # tokens emitted per target pass that carried drafts
    predicted_speedup: float | None  # the cost model's expectation for the whole answer; None when nothing was drafted

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


@dataclass(slots=True)
class Done:
    """The end of a stream. finish_reason: stop | length | cancelled; `stop_sequence`: the stop string
    that ended it (None: the model's end of turn, or no stop)."""

    kind: ClassVar[str] = "done"
    finish_reason: str
    token_ids: list[int] = field(default_factory=list)
    stop_sequence: str | None = None


@dataclass(slots=True)
class Failed:
    """The request failed; the engine keeps serving others."""

    kind: ClassVar[str] = "error"
    error: LocalchatError

    @property
    def message(self) -> str:
        return str(self.error)


Event = Union[TextDelta, PrefillProgress, Stats, Done, Failed]


@dataclass(slots=True)
class Result:
    """A whole stream, collected."""

    text: str
    finish_reason: str
    token_ids: list[int]
    stats: Stats | None


class Stream:
    """The events of one request, in order. Iterate it; it ends after Done or Failed."""

    def __init__(self, request_id: str, cancel: Callable[[str], None],
                 sink: Callable[[Event], None] | None = None) -> None:
        self.id = request_id
        self._queue: queue.Queue[Event] = queue.Queue()
        self._cancel = cancel
        self.finished = False
        if sink is not None:  # the events go elsewhere as they come (a model runner sends them to the server)
            self.put = sink  # type: ignore[method-assign]

    def put(self, event: Event) -> None:
        self._queue.put(event)

    def cancel(self) -> None:
        """Stop this request at the next step, mid-prefill included."""
        self._cancel(self.id)

    def __iter__(self) -> Iterator[Event]:
        while not self.finished:
            event = self._queue.get()
            if isinstance(event, (Done, Failed)):
                self.finished = True
            yield event

    def result(self) -> Result:
        """Wait for the end; raise the request's error if it failed."""
        return collect(self)


def collect(events: Iterable[Event]) -> Result:
    """The whole of a request's events (a stream, or a view of one); raise its error if it failed."""
    parts, stats, done = [], None, None
    for event in events:
        if isinstance(event, TextDelta):
            parts.append(event.text)
        elif isinstance(event, Stats):
            stats = event
        elif isinstance(event, Done):
            done = event
        elif isinstance(event, Failed):
            raise event.error
    assert done is not None
    return Result("".join(parts), done.finish_reason, done.token_ids, stats)
