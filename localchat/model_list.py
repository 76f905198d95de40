"""`localchat models`: the catalog's files as the window's Models panel lists them (the same sizes, the
planner's same verdict and predicted speed for this machine, the same best pick), the downloaded ones
first, then the other model files found on this machine."""

from __future__ import annotations

import sys
from typing import TextIO

from . import gptq
from .models.catalog import load_catalog
from .models.download import cached_file
from .models.importers import local_models
from .ui.models.model_browser import (
    FOUND_IN,
    CatalogRow,
    Downloads,
    catalog_rows,
    choice_of,
    file_label,
    machine,
    size_text,
)

BEST = "*"


def list_models(out: TextIO | None = None) -> int:
    """Print the listing; the hardware is probed (a second or so) for the verdicts."""
    catalog = load_catalog()
    files = {choice_of(key, quant): f for key, model in catalog.items() for quant, f in model.files.items()}
    rows = catalog_rows(catalog, machine(), Downloads())
    here = {row.choice: cached_file(files[row.choice]) for row in rows}
    measured = any(row.measured for row in rows)
    downloaded = [row for row in rows if here[row.choice]]
    others = [row for row in rows if not here[row.choice]]
    sections = []
    if downloaded:
        cells = [[*_cells(row, measured), str(here[row.choice])] for row in downloaded]
        sections.append("Downloaded:\n" + _table(cells, [*_header(measured), "PATH"], downloaded))
    if others:
        sections.append("In the catalog (`localchat pull NAME` downloads one):\n"
                        + _table([_cells(row, measured) for row in others], _header(measured), others))
    known = {path.resolve() for path in here.values() if path}
    found = [m for m in local_models() if m.path.resolve() not in known]
    if found:
        sections.append("Other model files on this machine (`localchat chat --model PATH` uses one):\n" + _table(
            [[file_label(m), FOUND_IN.get(m.source, m.source), size_text(m.size), str(m.path)] for m in found],
            ["FILE", "FOUND IN", "SIZE", "PATH"]))
    notes = []
    if any(row.best for row in rows):
        notes.append(f"{BEST} best here: the planner's pick for this machine (`localchat plan` says why).")
    checkpoints = sorted({row.quant for row in rows if row.format == "gptq"})
    if checkpoints:
        needs = "" if gptq.extra_installed() else f"; each {gptq.NEEDS_EXTRA}: {gptq.INSTALL_HINT}"
        notes.append(f"{', '.join(checkpoints)}: GPTQ checkpoint folders for NVIDIA GPUs, run by the torch "
                     f"worker{needs}.")
    if not measured:
        notes.append("Measured speeds show here once `localchat tune` has measured this machine.")
    print("\n\n".join(sections + ["\n".join(notes)]), file=out or sys.stdout)
    return 0


def _header(measured: bool) -> list[str]:
    return ["NAME", "SIZE", "THIS MACHINE", "PREDICTED", *(["MEASURED"] if measured else [])]


def _cells(row: CatalogRow, measured: bool) -> list[str]:
    predicted = f"{row.verdict.decode_tps:.0f} tok/s" if row.verdict.decode_tps else "-"
    tuned = [f"{row.measured:.0f} tok/s" if row.measured else "not tuned"] if measured else []
    return [row.choice, row.size, row.verdict.short, predicted, *tuned]


def _table(cells: list[list[str]], header: list[str], rows: list[CatalogRow] | None = None) -> str:
    """Columns as wide as their widest cell; the best pick's row is marked in the margin."""
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(header))]
    marks = [BEST if row.best else " " for row in rows] if rows else [" "] * len(cells)

    def line(mark: str, values: list[str]) -> str:
        return (f"{mark} " + "  ".join(v.ljust(w) for v, w in zip(values, widths))).rstrip()

    return "\n".join([line(" ", header), *(line(m, c) for m, c in zip(marks, cells))])
