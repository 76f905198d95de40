"""The window's model browser without Gradio: the catalog with what fits this machine, the model files
found here, and background downloads that pause, resume and cancel."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import LocalchatError, ModelNotFoundError
from ...hardware import HardwareInfo
from ...models.catalog import ModelFacts, ModelFile
from ...models.download import cached_file, fetch_model_file
from ...models.hub import DownloadInterrupted
from ...models.importers import LocalModel
from ...planning.cost import DEFAULT_EFFICIENCY, devices_of
from ...planning.gptq_options import unavailable
from ...planning.planner import Plan, Wants, plan
from ...tune.profile import Profile, current_profile
from ...units import size_text as _size

log = logging.getLogger(__name__)

# Where each finder's files come from, in the words the window shows.
FOUND_IN = {"localchat": "localchat's models folder", "hub": "hub cache", "lmstudio": "LM Studio",
            "ollama": "Ollama", "path": "a path"}

_machine: list[HardwareInfo] = []
_machine_lock = threading.Lock()


def machine() -> HardwareInfo:
    """This machine as the planner sees it, probed once per process (a second or so): the GPUs this
    install can use, listed in a child process (the server never loads llama.cpp itself)."""
    from ...hardware.probe import probe
    from ...runtime.backends.gpus import usable

    with _machine_lock:
        if not _machine:
            _machine.append(usable(probe()))
        return _machine[0]


def size_text(n: int, exact: bool = True) -> str:
    """Bytes as localchat writes them (units.py); `≈` marks a hub listing's rounded figure."""
    return _size(n) if exact else "≈" + _size(n)


def shown_profile(hardware: HardwareInfo) -> Profile | None:
    """The tuned profile when it holds for this machine (a broken one is no profile here)."""
    try:
        return current_profile(hardware)
    except LocalchatError as exc:
        log.info("the tuned profile is not shown: %s", exc)
        return None


def measured_speed(profile: Profile | None, key: str, quant: str) -> float | None:
    """The decode tok/s the wizard measured for key+quant on this machine, if it measured it."""
    if profile is None:
        return None
    if (profile.model, profile.quant) == (key, quant) and profile.decode_tps:
        return profile.decode_tps
    for candidate in profile.candidates:
        if (candidate.get("model"), candidate.get("quant")) == (key, quant) and candidate.get("decode_tps"):
            return float(candidate["decode_tps"])
    return None


@dataclass(slots=True)
class Verdict:
    """The planner's word on one model+quant here: short for the table, in full for its tooltip."""

    short: str
    detail: str
    decode_tps: float | None = None


def verdict(hardware: HardwareInfo, catalog: dict[str, ModelFacts], key: str, quant: str, wants: Wants) -> Verdict:
    """What the planner says of one catalog file on this machine, with its predicted decode speed."""
    model = catalog[key]
    model_file = model.files[quant]
    if model_file.format == "gptq":
        # The planner offers a checkpoint only on an NVIDIA GPU with the extra: say which is missing.
        why = unavailable(devices_of(hardware, {**DEFAULT_EFFICIENCY, **wants.efficiency})[0], None)
        if why:
            return Verdict(why.split(":")[0], why)
    # The planner over this one file (the draft stays in the catalog for its pairing).
    alone = dataclasses.replace(model, files={quant: model_file})
    try:
        result = plan(hardware, {**catalog, key: alone}, dataclasses.replace(wants, family=key, n_ctx=None,
                                                                             min_decode_tps=0.0))
    except LocalchatError as exc:
        return Verdict("does not fit", str(exc))
    return Verdict(f"fits: {result.layout}, {result.n_ctx // 1024}k context", " ".join(result.reasons),
                   result.predicted_decode_tps)


def wants_for(profile: Profile | None) -> Wants:
    """The planner's wants with the wizard's measured corrections, as `localchat plan` uses them."""
    if profile is None:
        return Wants()
    return Wants(efficiency=dict(profile.efficiency), measured_acceptance=profile.measured_acceptance())


def best_plan(hardware: HardwareInfo, catalog: dict[str, ModelFacts], wants: Wants) -> Plan | None:
    try:
        return plan(hardware, catalog, wants)
    except LocalchatError:
        return None


def choice_of(key: str, quant: str) -> str:
    """The name a catalog file goes by in the window: key:QUANT."""
    return f"{key}:{quant}"


@dataclass(slots=True)
class CatalogRow:
    """One catalog file as the browser shows it."""

    choice: str
    name: str
    quant: str
    format: str
    size: str
    verdict: Verdict
    measured: float | None
    here: str
    best: bool = False


LOADED = "loaded now"  # what the tables say of the file the window answers with


def catalog_rows(catalog: dict[str, ModelFacts], hardware: HardwareInfo, downloads: Downloads,
                 loaded: Path | None = None) -> list[CatalogRow]:
    """One row per catalog file: sizes per quant, the planner's verdict and speed, the measured speed, whether
    it is here (`loaded`: the file answering now, wherever it lies; known by its name, as the API knows it)."""
    profile = shown_profile(hardware)
    wants = wants_for(profile)
    best = best_plan(hardware, catalog, wants)
    rows = []
    for key, model in catalog.items():
        for quant, model_file in model.files.items():
            choice = choice_of(key, quant)
            rows.append(CatalogRow(choice, model.name, quant, model_file.format,
                                   size_text(model_file.size, model_file.verified),
                                   verdict(hardware, catalog, key, quant, wants), measured_speed(profile, key, quant),
                                   LOADED if loaded is not None and loaded.name == model_file.file
                                   else downloads.here(choice, model_file),
                                   best is not None and (best.model, best.quant) == (key, quant)))
    return rows


def file_label(model: LocalModel) -> str:
    """A local file as it is listed: Ollama's blobs are named by their digest, so by Ollama's own model name."""
    return model.name if model.source == "ollama" else model.path.name


SPEED_SAMPLES = 8  # progress reports the shown speed spans (the hub client reports every 10 MB)


@dataclass(slots=True)
class Download:
    """One catalog file being fetched in the background; pause and cancel act at its next block."""

    choice: str
    model_file: ModelFile
    done: int = 0
    total: int = 0
    state: str = "downloading"  # downloading | pausing | paused | cancelling | cancelled | done | failed
    error: str = ""
    path: Path | None = None
    tries: int = 0  # runs started: a Resume after a failure is the next try, and the row says which
    ended: float = 0.0  # when the last run failed (time.time()), for the row to say
    # (when, bytes) of this run's latest reports: the speed shown is over them, so the bytes a resumed run
    # found on disk (its first report) and a stall long ago count for nothing.
    samples: list[tuple[float, int]] = field(default_factory=list)
    _thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self.state, self.error, self.samples = "downloading", "", []
        self.tries += 1
        self._thread = threading.Thread(target=self._run, name=f"localchat-download-{self.choice}", daemon=True)
        self._thread.start()

    def _progress(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        self.samples = [*self.samples[-(SPEED_SAMPLES - 1):], (time.monotonic(), done)]
        if self.state in ("pausing", "cancelling"):
            raise DownloadInterrupted(keep=self.state == "pausing")

    def _run(self) -> None:
        try:
            self.path = fetch_model_file(self.model_file, self._progress)
            self.done = self.total = self.path.stat().st_size
            self.state = "done"
        except DownloadInterrupted as stop:
            self.state = "paused" if stop.keep else "cancelled"
        except Exception as exc:  # any failure ends the job with its reason: the window must not show it running
            reason = str(exc)
            if not isinstance(exc, LocalchatError):  # unforeseen: its kind says more, its traceback goes to the log
                log.exception("downloading %s failed", self.choice)
                reason = f"{type(exc).__name__}: {exc} (the log file has the details)"
            self.state, self.error = ("cancelled", "") if self.state == "cancelling" else ("failed", reason)
            self.ended = time.time()
        if self.state == "cancelled":
            self.done = 0

    def speed(self) -> float | None:
        """Bytes per second over the latest reports; None until there are two."""
        if len(self.samples) < 2 or self.samples[-1][0] <= self.samples[0][0]:
            return None
        (t0, d0), (t1, d1) = self.samples[0], self.samples[-1]
        return (d1 - d0) / (t1 - t0)


class Downloads:
    """The window's downloads, one per catalog file, shared by every tab."""

    def __init__(self) -> None:
        self._all: dict[str, Download] = {}
        self._lock = threading.Lock()

    def all(self) -> list[Download]:
        return list(self._all.values())

    def get(self, choice: str) -> Download | None:
        return self._all.get(choice)

    def start(self, choice: str, model_file: ModelFile) -> Download:
        """Start (or resume) fetching a catalog file; a running one is left as it is."""
        with self._lock:
            job = self._all.get(choice)
            if job is not None and (job.running or job.state == "done"):
                return job
            if job is None:
                job = self._all[choice] = Download(choice, model_file, total=model_file.size)
            job.start()
            return job

    def pause(self, choice: str) -> Download:
        job = self._running(choice, "pause")
        job.state = "pausing"
        return job

    def cancel(self, choice: str) -> Download:
        """Stop the download and delete what it fetched so far (a paused one is resumed only to delete it)."""
        with self._lock:
            job = self._all.get(choice)
            if job is None or job.state in ("done", "cancelled", "failed"):
                raise ModelNotFoundError(f"{choice} is not downloading; there is nothing to cancel.")
            was_running, job.state = job.running, "cancelling"
            if not was_running:
                # The partial copy lies where only the download knows: start it to have it deleted at once.
                job._thread = threading.Thread(target=job._run, name=f"localchat-cancel-{choice}", daemon=True)
                job._thread.start()
            return job

    def _running(self, choice: str, verb: str) -> Download:
        job = self._all.get(choice)
        if job is None or job.state != "downloading":
            raise ModelNotFoundError(f"{choice} is not downloading; there is nothing to {verb}.")
        return job

    def here(self, choice: str, model_file: ModelFile) -> str:
        """Whether a catalog file is on this machine, or how far its download is."""
        job = self._all.get(choice)
        if job is not None and job.state not in ("done", "cancelled", "failed"):
            return f"{job.state} {percent(job)}"
        return "downloaded" if cached_file(model_file) else "not here"


def percent(job: Download) -> str:
    return f"{100 * job.done / job.total:.0f}%" if job.total else "0%"
