"""A model file's identity for its KV states: a digest of its header and of samples spread across
all of its tensor data.

A KV state is valid only in a context running the same weights. The first MiB of a file is its
header (SmolLM2-135M's alone is 1.78 MB), which a fine-tune or another checkpoint of the same base
shares byte for byte, as it shares the size and parameter count: a same-sized copy of SmolLM2 with
other weights restored SmolLM2's saved state and answered from it. A fine-tune changes every
tensor, so samples spread evenly over the whole file see it; 1,024 blocks of 16 KiB read 16 MiB
whatever the file's size (a whole-file digest of a 20 GB model would take most of a minute).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

HEAD_BYTES = 1 << 20  # the header and the first tensors, whole
NUM_SAMPLES = 1024
SAMPLE_BYTES = 16 << 10


def weights_digest(path: str | Path) -> str:
    """The hex SHA-256 of the file's size, its first MiB and NUM_SAMPLES blocks spread evenly over the rest
    (the last block included)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        digest.update(str(size).encode() + b"\0")
        digest.update(handle.read(HEAD_BYTES))
        rest = size - HEAD_BYTES
        if rest > 0:
            step = max(SAMPLE_BYTES, rest // NUM_SAMPLES)
            offsets = sorted({HEAD_BYTES + min(i * step, rest - SAMPLE_BYTES if rest > SAMPLE_BYTES else 0)
                              for i in range(NUM_SAMPLES)} | {max(HEAD_BYTES, size - SAMPLE_BYTES)})
            for offset in offsets:
                handle.seek(offset)
                digest.update(handle.read(SAMPLE_BYTES))
    return digest.hexdigest()
