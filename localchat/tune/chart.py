"""A PNG chart of predicted vs measured speed and memory: matplotlib when installed, else Pillow."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(slots=True)
class ChartRow:
    """One measured candidate."""

    label: str
    predicted_decode: float
    measured_decode: float
    predicted_prefill: float
    measured_prefill: float
    predicted_memory_mb: float
    measured_memory_mb: float


PANELS = (("decode tokens/s", "predicted_decode", "measured_decode"),
          ("prefill tokens/s", "predicted_prefill", "measured_prefill"),
          ("memory MB", "predicted_memory_mb", "measured_memory_mb"))
PREDICTED, MEASURED = "#9db4d6", "#2b5d9e"


def save_chart(rows: list[ChartRow], path: Path, title: str) -> str:
    """Write the chart; returns the library that drew it ('matplotlib' or 'pillow')."""
    try:
        import matplotlib
    except ImportError:
        _with_pillow(rows, path, title)
        return "pillow"
    matplotlib.use("Agg")  # no display: the wizard also runs headless
    _with_matplotlib(rows, path, title)
    return "matplotlib"


def _with_matplotlib(rows: list[ChartRow], path: Path, title: str) -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(4 * len(PANELS), 3.6))
    xs = range(len(rows))
    for ax, (name, predicted, measured) in zip(axes, PANELS):
        ax.bar([x - 0.2 for x in xs], [getattr(r, predicted) for r in rows], 0.4, label="predicted", color=PREDICTED)
        ax.bar([x + 0.2 for x in xs], [getattr(r, measured) for r in rows], 0.4, label="measured", color=MEASURED)
        ax.set_title(name, fontsize=10)
        ax.set_xticks(list(xs), [r.label for r in rows], fontsize=8, rotation=15)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _with_pillow(rows: list[ChartRow], path: Path, title: str) -> None:
    from PIL import Image, ImageDraw

    panel_w, height, top, bottom = 300, 300, 40, 50
    image = Image.new("RGB", (panel_w * len(PANELS), height), "white")
    draw = ImageDraw.Draw(image)
    draw.text((10, 8), title, fill="black")
    for p, (name, predicted, measured) in enumerate(PANELS):
        x0 = p * panel_w + 20
        draw.text((x0, 24), name, fill="black")
        values = [v for r in rows for v in (getattr(r, predicted), getattr(r, measured))]
        scale = (height - top - bottom) / max(max(values, default=0), 1e-9)
        slot = (panel_w - 40) / max(len(rows), 1)
        base = height - bottom
        for i, row in enumerate(rows):
            left = x0 + i * slot
            pair = ((getattr(row, predicted), PREDICTED), (getattr(row, measured), MEASURED))
            for j, (value, color) in enumerate(pair):
                bar_left = left + 4 + j * (slot - 8) / 2
                draw.rectangle([bar_left, base - value * scale, bar_left + (slot - 8) / 2 - 2, base], fill=color)
                draw.text((bar_left, base - value * scale - 12), f"{value:.0f}", fill="black")
            draw.text((left + 4, base + 6), row.label[:18], fill="black")
        draw.line([x0, base, x0 + panel_w - 40, base], fill="black")
    draw.text((10, height - 18), "light: predicted   dark: measured", fill="black")
    image.save(path, format="PNG")
