"""Bytes as localchat writes them, in every table, message and progress line: decimal units (and, at the
end, elapsed times).

1 GB is 10^9 bytes, as disks, download sizes and the model hub's listings count. Memory is written the
same way (a "16 GB" machine shows 17.2 GB), so a model's size and the memory it must fit in compare at a
glance, in one unit: `probe`, `plan`, the wizard, `models` and the window all write sizes through
`size_text`, never GiB or MiB. The code keeps binary constants where they are limits (`4 << 30`); a
message that names one writes it with `size_text` too. (llama.cpp's own log says MiB; tune/measure.py
reads it as such, and writes what it read in these units.)
"""

from __future__ import annotations

_UNITS = ("B", "kB", "MB", "GB", "TB")


def size_text(n: float | None) -> str:
    """`n` bytes as 512 B, 93 MB, 9.4 MB, 16.5 GB; "?" when unknown (None)."""
    if n is None:
        return "?"
    value, unit = float(n), 0
    # The unit is chosen after rounding, so 999.7 MB reads 1.0 GB rather than 1000 MB.
    while unit < len(_UNITS) - 1 and round(abs(value), _decimals(unit, value)) >= 1000:
        value, unit = value / 1000, unit + 1
    return f"{value:.{_decimals(unit, value)}f} {_UNITS[unit]}"


def _decimals(unit: int, value: float) -> int:
    if unit >= 3:  # GB and up: 16.5 GB, 1.1 GB
        return 1
    if unit == 0:
        return 0
    return 1 if abs(value) < 9.95 else 0  # 9.4 MB, 93 MB


def rate_text(n: float | None) -> str:
    """`n` bytes per second, as 34.0 GB/s; "?" when unknown (None or 0: not measured)."""
    return size_text(n) + "/s" if n else "?"


def duration_text(seconds: float) -> str:
    """An elapsed time as 8 s, 2 min 05 s, 1 h 02 min."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"
