"""A tool's result as the model reads it and a page shows it: text, capped (with a note saying so), images kept
for a model that sees them; never markup or instructions to localchat, only input to the model."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

MAX_IMAGES = 4
MAX_IMAGE_BYTES = 8 << 20  # one image, decoded


@dataclass(slots=True)
class ToolOutcome:
    """What one call gave: its text, images (mime type, base64), whether the tool said it failed, and how many
    characters the cap cut."""

    text: str
    images: list[tuple[str, str]] = field(default_factory=list)
    is_error: bool = False
    cut_chars: int = 0
    seconds: float = 0.0


def _block_text(block: Any, images: list[tuple[str, str]]) -> str:
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(block.text)
    if kind == "image":
        data, mime = str(getattr(block, "data", "")), str(getattr(block, "mime_type", "") or "image/png")
        if len(images) < MAX_IMAGES and len(data) * 3 // 4 <= MAX_IMAGE_BYTES and mime.startswith("image/"):
            try:
                base64.b64decode(data, validate=True)
            except ValueError:
                return "[an image that is not valid base64, left out]"
            images.append((mime, data))
            return f"[image {len(images)}: {mime}]"
        return f"[an image ({mime}) left out: over {MAX_IMAGES} images or {MAX_IMAGE_BYTES >> 20} MiB]"
    if kind == "audio":
        return f"[audio ({getattr(block, 'mime_type', '')}), which this chat does not play]"
    if kind == "resource_link":
        return f"[resource {getattr(block, 'name', '')}: {getattr(block, 'uri', '')}]"
    if kind == "resource":
        resource = getattr(block, "resource", None)
        text = getattr(resource, "text", None)
        uri = getattr(resource, "uri", "")
        return f"[resource {uri}]\n{text}" if isinstance(text, str) else f"[resource {uri}: binary, left out]"
    return f"[a {kind or 'content'} block this chat does not read]"


def outcome_of(result: Any, max_chars: int) -> ToolOutcome:
    """A CallToolResult as a ToolOutcome: its blocks' text joined (structured content where there is none),
    cut at `max_chars` with a note that says how much was cut and why."""
    images: list[tuple[str, str]] = []
    parts = [_block_text(block, images) for block in (getattr(result, "content", None) or [])]
    structured = getattr(result, "structured_content", None)
    if not any(parts) and structured is not None:
        parts = [json.dumps(structured, ensure_ascii=False, default=str)]
    return capped("\n".join(parts), max_chars, images, bool(getattr(result, "is_error", False)))


def capped(text: str, max_chars: int, images: list[tuple[str, str]] | None = None,
           is_error: bool = False) -> ToolOutcome:
    cut = max(0, len(text) - max_chars)
    if cut:
        text = text[:max_chars] + f"\n[... {cut} more characters cut: the result was over the limit of {max_chars}]"
    return ToolOutcome(text, images or [], is_error, cut)
