"""The model hub through huggingface_hub: file metadata, and resumable, verified downloads into the shared hub cache."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable
from urllib.parse import urlparse

from tqdm import tqdm

from ..errors import DownloadError
from ..paths import DISK_MARGIN
from ..units import size_text
from .hub_errors import explain_hub_error

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
DEFAULT_ENDPOINT = "https://huggingface.co"
CHUNK = 1 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SHA1 = re.compile(r"[0-9a-f]{40}")  # a git commit, or the git blob id the hub gives a small file as its ETag


class DownloadInterrupted(Exception):
    """Raised by a caller's progress callback to stop a download: `keep` leaves the partial copy for a
    resume (pause), otherwise it is deleted (cancel). Not a DownloadError: no other source is tried."""

    def __init__(self, keep: bool) -> None:
        super().__init__("download paused" if keep else "download cancelled")
        self.keep = keep


@dataclass(slots=True)
class HubFile:
    """What the hub reports about one file: where its bytes are, their size and checksum."""

    repo: str
    filename: str
    revision: str
    commit: str
    etag: str  # the LFS sha256 for LFS files (every GGUF), the git blob sha1 for small files
    size: int | None
    url: str  # the download location (a CDN address for LFS files)

    @property
    def sha256(self) -> str | None:
        """The file's sha256 when the hub stores it with LFS."""
        return self.etag if _SHA256.fullmatch(self.etag) else None


def hub_endpoint() -> str:
    """The hub address, read at call time so HF_ENDPOINT set after import still counts."""
    return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")


def hub_cache_dir() -> Path:
    """The standard hub cache (HF_HUB_CACHE, else HF_HOME/hub), shared with every other hub tool."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "~/.cache")
    return Path(os.environ.get("HF_HOME", os.path.join(xdg, "huggingface"))).expanduser() / "hub"


def _repo_folder(cache: Path, repo: str) -> Path:
    return cache / ("models--" + repo.replace("/", "--"))


def cached_hub_file(repo: str, filename: str, revision: str = "main") -> Path | None:
    """The file from the hub cache if a complete copy is there (no network)."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo, filename, cache_dir=str(hub_cache_dir()), revision=revision)
    return Path(found) if isinstance(found, str) else None


def hub_file_info(repo: str, filename: str, revision: str = "main") -> HubFile:
    """Ask the hub (one HEAD request) for a file's commit, checksum, size and download address."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    endpoint = hub_endpoint()
    url = hf_hub_url(repo, filename, revision=revision, endpoint=endpoint)
    try:
        meta = get_hf_file_metadata(url, endpoint=endpoint)
    except Exception as exc:
        raise explain_hub_error(exc, endpoint, repo, filename, revision) from None
    if not meta.commit_hash or not meta.etag:
        raise DownloadError(
            f"{endpoint} answered for {repo}/{filename} without the hub's file headers (X-Repo-Commit, ETag); "
            "it does not look like a model hub. Check HF_ENDPOINT and any proxy settings."
        )
    # The commit and the ETag name folders and files in the cache: only checksums may (never "../../x").
    if (not _SHA1.fullmatch(meta.commit_hash) or not (_SHA256.fullmatch(meta.etag) or _SHA1.fullmatch(meta.etag))
            or (meta.size is not None and meta.size < 0)):
        raise DownloadError(
            f"{endpoint} answered for {repo}/{filename} with file headers a model hub does not send (commit "
            f"{meta.commit_hash[:80]!r}, ETag {meta.etag[:80]!r}, size {meta.size}); nothing was downloaded. "
            "Check HF_ENDPOINT and any proxy settings."
        )
    return HubFile(repo=repo, filename=filename, revision=revision, commit=meta.commit_hash,
                   etag=meta.etag, size=meta.size, url=meta.location)


def download_hub_file(repo: str, filename: str, *, revision: str = "main", sha256: str | None = None,
                      progress: Progress | None = None) -> Path:
    """A hub file in the hub cache: fetched (resuming any earlier partial copy) and verified when needed."""
    parts = filename.split("/")
    if "\\" in filename or any(part in ("", ".", "..") for part in parts):
        # A name from a repo listing becomes a path in the cache: it must stay inside its snapshot folder.
        raise DownloadError(f"{repo} names a file {filename[:120]!r} that is not a plain path inside the repo; "
                            "it was not downloaded. Pick another repo.")
    cached = cached_hub_file(repo, filename, revision)
    if cached is not None:
        return cached
    info = hub_file_info(repo, filename, revision)
    if sha256 and info.sha256 and sha256 != info.sha256:
        # The repo now holds other bytes than the catalog pinned: refetching would not help.
        raise DownloadError(
            f"{repo}/{filename} on the hub has sha256 {info.sha256}, but the catalog expects {sha256}: "
            "the repo has changed since the catalog was written. Update localchat, or download the file "
            "yourself and pass its path."
        )
    blob = _repo_folder(hub_cache_dir(), repo) / "blobs" / info.etag
    if not blob.is_file():
        _fetch_blob(info, blob, sha256, progress)
    return _link_into_cache(info, blob)


def download_hub_files(repo: str, files: dict[str, int], *, revision: str = "main",
                       progress: Progress | None = None) -> list[Path]:
    """Several files of one repo (name -> size, fetched in that order) into one snapshot folder, each resumed
    and verified as download_hub_file does, with one progress over them all; their paths, in that order."""
    total = sum(files.values())
    check_disk_space(total, hub_cache_dir(), f"{repo} ({len(files)} files)")
    done_before, paths = 0, []
    for name, size in files.items():
        def each(done: int, _total: int, before: int = done_before) -> None:
            if progress:
                progress(before + done, total)
        paths.append(download_hub_file(repo, name, revision=revision, progress=each))
        done_before += size
    if len({path.parent for path in paths}) != 1:  # a new commit between two files: they do not belong together
        raise DownloadError(f"{repo} changed while it was being fetched; run the same command again.")
    if progress:
        progress(total, total)
    return paths


def _fetch_blob(info: HubFile, blob: Path, sha256: str | None, progress: Progress | None) -> None:
    from huggingface_hub.utils import WeakFileLock

    blob.parent.mkdir(parents=True, exist_ok=True)
    # The hub client's own lock for this blob: a concurrent download by any hub tool waits for ours.
    lock = hub_cache_dir() / ".locks" / _repo_folder(Path(), info.repo).name / f"{info.etag}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    # A fixed name (not per process) is what lets the next run resume after a crash or Ctrl-C.
    partial = blob.with_name(info.etag + ".incomplete")
    with WeakFileLock(str(lock)):
        if blob.is_file():
            return
        for attempt in (1, 2):
            try:
                digests = _download(info, partial, progress)
            except DownloadInterrupted as stop:
                if not stop.keep:
                    partial.unlink(missing_ok=True)
                raise
            bad = _mismatch(info, sha256, digests)
            if bad is None:
                os.replace(partial, blob)
                return
            partial.unlink(missing_ok=True)
            if attempt == 2:
                raise DownloadError(
                    f"{info.repo}/{info.filename} failed its checksum twice ({bad}); the copy was deleted. "
                    "The network or a proxy may be altering the data: try again later or from another network."
                )
            log.warning("%s failed its checksum (%s); fetching it again", info.filename, bad)


def _mismatch(info: HubFile, sha256: str | None, digests: dict[str, str]) -> str | None:
    """Why the downloaded bytes are wrong, or None when every known checksum matches."""
    for source, expected in (("catalog", sha256), ("hub", info.sha256)):
        if expected and digests["sha256"] != expected:
            return f"sha256 {digests['sha256']}, the {source} says {expected}"
    if info.sha256 is None and "git-sha1" in digests and digests["git-sha1"] != info.etag:
        return f"git blob sha1 {digests['git-sha1']}, the hub says {info.etag}"
    return None


def _download(info: HubFile, partial: Path, progress: Progress | None) -> dict[str, str]:
    """Fill `partial` up to the whole file with the hub client's HTTP download; returns its checksums."""
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    have = partial.stat().st_size if partial.exists() else 0
    if info.size is not None and have > info.size:
        partial.unlink()  # longer than the file: not a prefix of it
        have = 0
    if info.size is not None:
        check_disk_space(info.size - have, partial.parent, info.filename)
    headers = build_hf_headers()
    if urlparse(info.url).netloc != urlparse(hub_endpoint()).netloc:
        # A signed CDN address: the hub token must not travel to another host.
        headers.pop("authorization", None)
    with partial.open("ab") as handle:
        sink = _Sink(handle, partial, info, progress)
        if have:
            log.info("resuming %s at %d of %s bytes", info.filename, have, info.size)
        try:
            http_get(info.url, sink, resume_size=have, headers=headers, expected_size=info.size,
                     displayed_filename=info.filename, tqdm_class=_SilentBar if progress else None)
        except DownloadInterrupted:
            raise
        except Exception as exc:
            kept = f" {size_text(sink.done)} are kept; run the same command again to resume." if sink.done else ""
            raise explain_hub_error(exc, hub_endpoint(), info.repo, info.filename, info.revision, kept) from None
        return sink.hexdigests()


def _link_into_cache(info: HubFile, blob: Path) -> Path:
    """The snapshot entry and ref of a verified blob, laid out as the hub client lays them out (so every hub
    tool finds the file). Made here from the checked names: the hub client would ask the hub again, and a
    second answer could name another blob, or a path outside the cache."""
    folder = _repo_folder(hub_cache_dir(), info.repo)
    pointer = folder / "snapshots" / info.commit / info.filename
    try:
        pointer.parent.mkdir(parents=True, exist_ok=True)
        if not pointer.exists():
            partial = pointer.with_name(f"{pointer.name}.{os.getpid()}.link")
            partial.unlink(missing_ok=True)
            try:
                partial.symlink_to(os.path.relpath(blob, pointer.parent))
            except OSError:  # no symlinks here (Windows without developer mode): a hard link, else a copy
                try:
                    os.link(blob, partial)
                except OSError:
                    shutil.copyfile(blob, partial)
            os.replace(partial, pointer)
        if info.revision != info.commit:  # a branch or tag: the ref says which commit it meant
            ref = folder / "refs" / info.revision
            ref.parent.mkdir(parents=True, exist_ok=True)
            written = ref.with_name(f"{ref.name}.{os.getpid()}.tmp")
            written.write_text(info.commit, encoding="utf-8")
            os.replace(written, ref)
    except OSError as exc:
        raise DownloadError(f"{info.repo}/{info.filename} was downloaded, but adding it to the hub cache at "
                            f"{folder} failed ({exc}); check that folder's permissions and free space.") from None
    return pointer


def check_disk_space(needed: int, where: Path, what: str = "the download") -> None:
    """A clear error before a download that would not fit on the disk holding `where`."""
    probe = where
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed + DISK_MARGIN:
        raise DownloadError(
            f"not enough disk space for {what}: it needs {size_text(needed + DISK_MARGIN)} free (the file plus a "
            f"{size_text(DISK_MARGIN)} margin) at {where}, but only {size_text(free)} is free. Free some space, or set "
            "HF_HUB_CACHE to a folder on a bigger disk."
        )


class _SilentBar(tqdm):
    """The hub client's progress bar, muted: our caller shows progress through its own callback."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["disable"] = True
        super().__init__(*args, **kwargs)


class _Sink:
    """The partial file as the HTTP download sees it: each write also feeds the checksums and the progress."""

    def __init__(self, handle: BinaryIO, path: Path, info: HubFile, progress: Progress | None) -> None:
        self.handle, self.path, self.info, self.progress = handle, path, info, progress
        self._restart(handle.tell())

    def _restart(self, keep: int) -> None:
        # Checksums cover the bytes already on disk, so a resumed download is verified whole.
        self.digests = {"sha256": hashlib.sha256()}
        if self.info.sha256 is None and self.info.size is not None:
            # Small files are not in LFS: the hub's ETag is their git blob id.
            self.digests["git-sha1"] = hashlib.sha1(b"blob %d\0" % self.info.size)
        self.done = 0
        with self.path.open("rb") as old:
            while self.done < keep:
                block = old.read(min(CHUNK, keep - self.done))
                if not block:
                    break
                self._count(block, report=False)
        if self.done and self.progress:
            self.progress(self.done, self.info.size or self.done)

    def _count(self, block: bytes, report: bool = True) -> None:
        for digest in self.digests.values():
            digest.update(block)
        self.done += len(block)
        if report and self.progress:
            self.progress(self.done, self.info.size or self.done)

    def write(self, block: bytes) -> int:
        written = self.handle.write(block)
        self._count(block)
        return written

    def tell(self) -> int:
        return self.handle.tell()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.handle.seek(offset, whence)

    def truncate(self, size: int | None = None) -> int:
        # The client truncates when a server ignored the Range header and sends the whole file again.
        kept = self.handle.truncate(size)
        self.handle.flush()
        self._restart(kept)
        return kept

    def hexdigests(self) -> dict[str, str]:
        return {name: digest.hexdigest() for name, digest in self.digests.items()}
