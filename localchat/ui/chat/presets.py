"""Presets: a chat's settings (system prompt, sampling, what it does when it outgrows the context, and
the context length) saved under a name, picked for a chat, and one of them, if chosen, the start of
every new chat. Kept in `presets.json` in the config dir; what is read back is checked like an import.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import RequestError
from ...paths import config_dir, private_file
from .session import checked_settings

MAX_PRESETS = 100
MAX_NAME = 60
MAX_SYSTEM_PROMPT = 64 * 1024


@dataclass(slots=True)
class Preset:
    name: str
    system_prompt: str = ""
    settings: dict[str, Any] = field(default_factory=dict)  # SHOWN_SETTINGS names -> values
    n_ctx: int | None = None  # the context length it was saved with

    def to_json(self) -> dict[str, Any]:
        return {"system_prompt": self.system_prompt, "settings": self.settings, "n_ctx": self.n_ctx}


class Presets:
    """The saved presets and the default one; thread-safe, written whole on every change."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or config_dir() / "presets.json"
        self._lock = threading.Lock()

    def _read(self) -> tuple[dict[str, Preset], str | None]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return {}, None  # none saved yet, or a file a person broke: start empty rather than fail
        found: dict[str, Preset] = {}
        entries = raw.get("presets") if isinstance(raw, dict) else None
        for name, entry in entries.items() if isinstance(entries, dict) else ():
            if isinstance(name, str) and isinstance(entry, dict) and 0 < len(name) <= MAX_NAME:
                system = entry.get("system_prompt")
                n_ctx = entry.get("n_ctx")
                found[name] = Preset(name, system if isinstance(system, str) else "",
                                     checked_settings(entry.get("settings") or {}),
                                     n_ctx if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) else None)
        default = raw.get("default") if isinstance(raw, dict) else None
        return found, default if default in found else None

    def _write(self, presets: dict[str, Preset], default: str | None) -> None:
        data = {"default": default, "presets": {name: p.to_json() for name, p in presets.items()}}
        temporary = private_file(self.path.with_suffix(".json.tmp"))
        temporary.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
        os.replace(temporary, self.path)  # whole or not at all: a crash mid-write keeps the old file

    def names(self) -> list[str]:
        return sorted(self._read()[0], key=str.casefold)

    def get(self, name: str | None) -> Preset | None:
        return self._read()[0].get(name or "")

    def default(self) -> Preset | None:
        presets, default = self._read()
        return presets.get(default or "")

    def save(self, preset: Preset, as_default: bool = False) -> None:
        """Keep `preset` under its name (replacing one of that name); `as_default`: new chats start from it."""
        name = preset.name.strip()
        if not 0 < len(name) <= MAX_NAME:
            raise RequestError(f"a preset needs a name of 1 to {MAX_NAME} characters.")
        if len(preset.system_prompt) > MAX_SYSTEM_PROMPT:
            raise RequestError(f"a preset's system prompt may be at most {MAX_SYSTEM_PROMPT:,} characters.")
        with self._lock:
            presets, default = self._read()
            if name not in presets and len(presets) >= MAX_PRESETS:
                raise RequestError(f"there are {MAX_PRESETS} presets already; delete one first.")
            presets[name] = Preset(name, preset.system_prompt, checked_settings(preset.settings), preset.n_ctx)
            self._write(presets, name if as_default else (None if default == name else default))

    def delete(self, name: str) -> bool:
        with self._lock:
            presets, default = self._read()
            if presets.pop(name, None) is None:
                return False
            self._write(presets, None if default == name else default)
            return True
