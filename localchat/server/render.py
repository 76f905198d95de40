"""Text for the chat window: model output made inert, stats and progress lines, the status panel."""

from __future__ import annotations

import html
import os
import re
from pathlib import Path
from typing import Any

from ..runtime.events import Stats

# Fenced code blocks and inline code spans render their content as text already; escaping it
# too would show "&lt;" inside code.
_CODE = re.compile(r"(```.*?(?:```|\Z)|`[^`\n]+`)", re.S)
_MD_SPECIAL = re.compile(r"([\\`*_\[\]#|])")


def inert(text: str) -> str:
    """Markdown whose HTML shows as text: no tag in model output ever becomes an element."""
    parts = _CODE.split(text)
    return "".join(part if i % 2 else html.escape(part, quote=False) for i, part in enumerate(parts))


def plain(text: str) -> str:
    """Text shown literally inside markdown (file names, summaries)."""
    return _MD_SPECIAL.sub(r"\\\1", html.escape(text, quote=False))


def stats_dict(stats: Stats | None, n_ctx: int) -> dict[str, Any]:
    """The numbers kept with a reply in the store."""
    if stats is None:
        return {}
    out: dict[str, Any] = {
        "prompt_tokens": stats.prompt_tokens, "cached_tokens": stats.cached_tokens,
        "completion_tokens": stats.completion_tokens, "ttft_ms": round(stats.ttft_ms, 1),
        "tokens_per_s": round(stats.tokens_per_s, 1), "n_ctx": n_ctx,
    }
    if stats.spec is not None and stats.spec.drafted:
        out["spec_acceptance"] = round(stats.spec.acceptance, 3)
        out["spec_drafter"] = stats.spec.drafter
    return out


def stats_line(stats: dict[str, Any]) -> str:
    """"TTFT 80 ms · 140.2 tokens/s · context 312 / 8,192" for under a reply."""
    if not stats.get("completion_tokens") and "ttft_ms" not in stats:
        return ""
    items = [f"TTFT {stats['ttft_ms']:,.0f} ms", f"{stats['tokens_per_s']:.1f} tokens/s"]
    if "spec_acceptance" in stats:
        items.append(f"speculative acceptance {stats['spec_acceptance']:.0%} ({stats['spec_drafter']})")
    if stats.get("cached_tokens"):
        items.append(f"{stats['cached_tokens']:,} prompt tokens reused")
    used = stats["prompt_tokens"] + stats["completion_tokens"]
    items.append(f"context {used:,} / {stats['n_ctx']:,}")
    return " · ".join(items)


def reply_markdown(answer: str, stats: dict[str, Any], included: str = "", note: str = "") -> str:
    """A reply as shown: the answer, then what documents it read, then its numbers."""
    lines = [inert(answer) if answer else "…"]
    if included:
        lines.append(f"**Included:** {plain(included)}")
    footer = " · ".join(x for x in (note, stats_line(stats)) if x)
    if footer:
        lines.append(f"*{plain(footer)}*")
    return "\n\n".join(lines)


def prefill_line(done: int, total: int, started: float, first_done: int, now: float) -> str:
    """"Reading the prompt: 1,024 / 4,096 tokens (25%), about 6 s left"."""
    line = f"Reading the prompt: {done:,} / {total:,} tokens ({done / max(total, 1):.0%})"
    elapsed = now - started
    if done > first_done and elapsed > 0.2:
        rate = (done - first_done) / elapsed
        line += f", about {max((total - done) / rate, 0):.0f} s left"
    return line + " — Stop cancels."


def status_markdown(model: str, path: Path, description: str, n_ctx: int, placement: str,
                    speculation: str) -> str:
    """The status panel: model, file and quant, context, placement, memory."""
    import psutil

    rss = psutil.Process(os.getpid()).memory_info().rss
    try:
        size = f"{path.stat().st_size / 1e6:,.0f} MB"
    except OSError:
        size = "?"
    rows = [("Model", model), ("Weights", description), ("File", f"{path.name} ({size})"),
            ("Context", f"{n_ctx:,} tokens"), ("Placement", placement), ("Speculation", speculation),
            ("Memory", f"{rss / 2**20:,.0f} MiB resident")]
    return "\n".join(f"- **{k}:** {plain(v)}" for k, v in rows)
