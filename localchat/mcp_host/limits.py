"""How far a model's tool use may go: one call's time, a result's size, the calls in one answer. Settings
(`mcp_call_timeout`, `mcp_result_chars`, `mcp_steps`) set them at start; the API and the window read them here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ToolLimits:
    call_seconds: float = 60.0
    result_chars: int = 20_000
    steps: int = 8  # model turns in one answer that may call tools


LIMITS = ToolLimits()


def configure(call_seconds: float, result_chars: int, steps: int) -> None:
    LIMITS.call_seconds, LIMITS.result_chars, LIMITS.steps = call_seconds, result_chars, steps
