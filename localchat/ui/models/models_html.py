"""The Models panel's HTML: the catalog table, the local files table and the download bars (every text
escaped: model names and error messages come from files and servers)."""

from __future__ import annotations

import time
from html import escape
from pathlib import Path

from ...models import bad_files
from ...models.gguf_info import is_embedding_model
from ...models.importers import LocalModel
from ...units import rate_text
from .model_browser import FOUND_IN, LOADED, CatalogRow, Download, file_label, percent, size_text

# Scoped to the panel; the theme's own colours keep it readable in dark mode.
USABLE_TPS = 1.0  # below a token a second a model that fits is still no use for a chat

STYLE = """<style>
.lc-table-wrap { max-height: 26rem; overflow: auto; border: 1px solid var(--border-color-primary);
  border-radius: var(--radius-md); }
.lc-table { width: 100%; border-collapse: collapse; border: none !important; font-size: var(--text-sm); }
.lc-table th { position: sticky; top: 0; background: var(--background-fill-secondary); text-align: left;
  font-weight: 600; }
.lc-table th, .lc-table td { padding: 0.3rem 0.55rem; border: none !important;
  border-bottom: 1px solid var(--border-color-primary) !important; vertical-align: top; }
.lc-table td:first-child { white-space: nowrap; }
.lc-table td.lc-num { white-space: nowrap; text-align: right; }
.lc-table tr.lc-best { background: var(--color-accent-soft); }
.lc-badge { font-size: 0.75em; padding: 0 0.35em; border-radius: 0.5em; background: var(--color-accent);
  color: white; white-space: nowrap; }
.lc-loaded { background: #15803d; }  /* green, white text at 5:1: the file answering now */
.lc-no { color: var(--body-text-color-subdued); }
.lc-what { color: var(--body-text-color-subdued); font-size: 0.85em; white-space: normal; }
.lc-bad { color: var(--error-text-color, #b91c1c); font-size: 0.85em; white-space: normal; }
.lc-path { font-family: var(--font-mono); font-size: 0.85em; word-break: break-all; min-width: 24rem;
  color: var(--body-text-color-subdued); }
.lc-actions { white-space: nowrap; }
/* Small row buttons, not the page's big ones: a table of files stays a table. */
.lc-table .lc-actions button { padding: 0.05rem 0.5rem !important; margin: 0 0.1rem 0 0; min-width: 0;
  font-size: var(--text-sm) !important; font-weight: 400 !important; line-height: 1.4; box-shadow: none !important;
  border: 1px solid var(--border-color-primary) !important; border-radius: var(--radius-sm) !important;
  background: var(--button-secondary-background-fill) !important; color: var(--button-secondary-text-color);
  cursor: pointer; }
.lc-table .lc-actions button:disabled { opacity: 0.45; cursor: default; }
/* Red like the chat's Delete (it cannot be undone), hovered and focused too. */
.lc-table .lc-actions .lc-file-delete, .lc-table .lc-actions .lc-file-delete:hover { color: #b91c1c !important; }
.dark .lc-table .lc-actions .lc-file-delete, .dark .lc-table .lc-actions .lc-file-delete:hover {
  color: #fca5a5 !important; }
/* A phone: a file's name wraps, so its Load and Delete sit on the screen beside it. */
@media (max-width: 800px) { .lc-table td:first-child { white-space: normal; overflow-wrap: anywhere;
  min-width: 7rem; } }
.lc-download { margin: 0.25rem 0; }
.lc-download progress { width: 14rem; height: 0.7rem; vertical-align: middle; appearance: none;
  border: 1px solid var(--border-color-primary); border-radius: 0.35rem; overflow: hidden;
  background: var(--background-fill-secondary); }
.lc-download progress::-webkit-progress-bar { background: var(--background-fill-secondary); }
.lc-download progress::-webkit-progress-value { background: var(--color-accent); }
.lc-download progress::-moz-progress-bar { background: var(--color-accent); }
</style>"""


def _cell(text: str, css: str = "", title: str = "") -> str:
    attrs = (f" class='{css}'" if css else "") + (f" title='{escape(title)}'" if title else "")
    return f"<td{attrs}>{escape(text)}</td>"


def rate(tps: float) -> str:
    """A decode speed as the table shows it: a slow one keeps a decimal, so it never reads as 0."""
    return f"{tps:.1f} tok/s" if tps < 10 else f"{tps:.0f} tok/s"


def catalog_table(rows: list[CatalogRow]) -> str:
    """The catalog, one file a row; the verdict's reasons are its tooltip."""
    head = "".join(f"<th>{h}</th>" for h in ("Model", "Quant", "Format", "Size", "This machine", "Predicted",
                                             "Measured", "Here"))
    body = []
    for row in rows:
        said, tps = row.verdict.short, row.verdict.decode_tps
        fits = said.startswith("fits")
        if fits and tps is not None and 0 < tps < USABLE_TPS:  # it fits, but nobody would wait for it
            said, fits = f"fits, too slow to use ({said.removeprefix('fits').lstrip(': ')})", False
        badge = " <span class='lc-badge'>best here</span>" if row.best else ""  # after the verdict: no run-on
        body.append(
            f"<tr data-choice='{escape(row.choice)}'{' class=lc-best' if row.best else ''}>"
            + _cell(row.name) + _cell(row.quant) + _cell(row.format) + _cell(row.size, "lc-num")
            + f"<td title='{escape(row.verdict.detail)}' class='{'' if fits else 'lc-no'}'>{escape(said)}{badge}</td>"
            + _cell(rate(tps) if tps else "–", "lc-num")
            + _cell(rate(row.measured) if row.measured else "not tuned", "lc-num" if row.measured else "lc-no")
            + (f"<td><span class='lc-badge lc-loaded' data-loaded='1'>{LOADED}</span></td>" if row.here == LOADED
               else _cell(row.here, "" if row.here != "not here" else "lc-no")) + "</tr>")
    return (f"{STYLE}<div class='lc-table-wrap'><table class='lc-table'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>")


def local_table(models: list[LocalModel], loaded: Path | None = None) -> str:
    """The GGUF files found on this machine and where (local_files.py: listed_files lists them, the file
    answering now first), each with Load and Delete; the loaded one is marked and its Load is off."""
    if not models:
        return "<p class='lc-no'>No GGUF files found here yet.</p>"
    bad = bad_files.reasons()
    now = loaded.resolve() if loaded is not None else None
    rows = []
    for m in models:
        this, embeds = m.path.resolve() == now, is_embedding_model(m.path)
        rows.append(f"<tr data-path='{escape(str(m.path))}'>{_local_name(m, bad(m.path), this, embeds)}"
                    f"{_actions(m, this, embeds)}"
                    f"{_cell(FOUND_IN.get(m.source, m.source))}"
                    f"{_cell(size_text(m.size), 'lc-num')}{_cell(str(m.path), 'lc-path')}</tr>")
    return (f"{STYLE}<div class='lc-table-wrap'><table class='lc-table'><thead><tr><th>File</th><th></th>"
            f"<th>Found in</th><th>Size</th><th>Path</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


EMBEDDINGS = "an embedding model: documents and /v1/embeddings use it; it writes no text"


def _actions(model: LocalModel, loaded: bool, embeds: bool) -> str:
    """Load (off for the file answering now and for an embedding model) and Delete; the page script sends the row's
    path with either."""
    path = escape(str(model.path))
    off = " disabled title='The model answering now'" if loaded else f" disabled title='{EMBEDDINGS}'" if embeds else ""
    load = f"<button class='lc-file-load' data-path='{path}'{off}>Load</button>"
    return f"<td class='lc-actions'>{load} <button class='lc-file-delete' data-path='{path}'>Delete</button></td>"


def _local_name(model: LocalModel, bad: str | None, loaded: bool = False, embeds: bool = False) -> str:
    """A local file's name cell, marked when it is the one answering, with what it is for when it is an embedding
    model, with why it does not load when it crashed the model runner (bad_files.py)."""
    if loaded:
        return f"<td>{escape(file_label(model))} <span class='lc-badge lc-loaded' data-loaded='1'>{LOADED}</span></td>"
    if bad is None and embeds:
        return (f"<td>{escape(file_label(model))}<br><span class='lc-what'>{EMBEDDINGS}</span></td>")
    if bad is None:
        return _cell(file_label(model))
    return (f"<td>{escape(file_label(model))}<br><span class='lc-bad' data-bad='1'>does not load: {escape(bad)}"
            "</span></td>")


def progress_html(jobs: list[Download]) -> str:
    """Each download as a bar with its bytes, speed and state."""
    if not jobs:
        return "<p class='lc-no'>No downloads yet: choose a file and press Download.</p>"
    rows = []
    for job in jobs:
        speed = job.speed()
        said = {"downloading": "downloading" + (f", {rate_text(speed)}" if speed else ""), "pausing": "pausing…",
                "paused": f"paused at {percent(job)}; Resume continues from there", "cancelling": "cancelling…",
                "cancelled": "cancelled; the partial file was deleted",
                "done": f"downloaded to {job.path.name if job.path else ''}; choose it in the Model list",
                "failed": _failed(job)}[job.state]
        if job.tries > 1 and job.state == "downloading":
            said += f" (try {job.tries})"
        rows.append(f"<div class='lc-download' data-choice='{escape(job.choice)}' data-state='{job.state}' "
                    f"data-tries='{job.tries}'><b>{escape(job.choice)}</b> {_bar(job)}"
                    f"{size_text(job.done)} of {size_text(job.total)} · {escape(said)}</div>")
    return STYLE + "".join(rows)


def _bar(job: Download) -> str:
    """The download's bar: while it runs, or for what it holds. One that failed or was cancelled with
    nothing fetched has none (an empty bar reads as a full one at a glance), nor does a size unknown."""
    if not job.total or (not job.done and job.state in ("failed", "cancelled")):
        return ""
    return f"<progress max='{job.total}' value='{min(job.done, job.total)}'></progress> "


def _failed(job: Download) -> str:
    """A failure with its try and time, so that a Resume that fails again reads as a new attempt."""
    again = f"failed again (try {job.tries}" if job.tries > 1 else "failed (try 1"
    reason = job.error.rstrip()
    if reason and reason[-1] not in ".!?":  # an unforeseen error's reason ends "(the log file has the details)"
        reason += "."
    return f"{again}, {time.strftime('%H:%M:%S', time.localtime(job.ended))}): {reason} Resume tries again."
