"""Where localchat keeps its files: platformdirs locations, all relocatable by LOCALCHAT_HOME."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "localchat"


def _home() -> Path | None:
    home = os.environ.get("LOCALCHAT_HOME")
    return Path(home).expanduser() if home else None


def _dir(kind: str) -> Path:
    home = _home()
    if home is not None:
        path = home / kind
    else:
        path = Path(getattr(platformdirs, f"user_{kind}_dir")(APP_NAME, appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path


def config_dir() -> Path:
    """Settings and the tuned hardware profile."""
    return _dir("config")


def cache_dir() -> Path:
    """Downloaded model files and other re-creatable data."""
    return _dir("cache")


def data_dir() -> Path:
    """Conversations, uploads: the user's own data."""
    return _dir("data")


def log_dir() -> Path:
    """Log files."""
    return _dir("log")


def models_dir() -> Path:
    """Model files fetched by localchat itself (not the shared hub cache)."""
    path = cache_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path
