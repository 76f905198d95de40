"""A hostile model hub (or mirror, or proxy) names no path: its headers are checked before the cache is
touched, and the window's download job ends with the reason whatever goes wrong (the real huggingface_hub
client against the local fake hub)."""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path

import pytest
from hub_server import FakeHub, serve_to_hub_client

from localchat.errors import DownloadError
from localchat.models.catalog import ModelFile
from localchat.models.hub import download_hub_file
from localchat.ui.models.model_browser import Downloads
from localchat.ui.models.models_html import progress_html

REPO, FILE = "org/tiny-GGUF", "tiny.Q8_0.gguf"
DATA = b"GGUF" + bytes(range(256)) * 64
CHOICE = "tiny:Q8_0"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    fake = FakeHub()
    fake.add(REPO, FILE, DATA)
    yield from serve_to_hub_client(fake, tmp_path, monkeypatch)


def model_file(name: str = FILE) -> ModelFile:
    return ModelFile("Q8_0", name, len(DATA), sources=[{"hub": {"repo": REPO, "file": name}}])


def finished(downloads: Downloads, timeout_s: float = 60.0):
    """The job once its thread ended (a job stuck as "downloading" fails here)."""
    job = downloads.get(CHOICE)
    deadline = time.monotonic() + timeout_s
    while job.running:
        assert time.monotonic() < deadline, f"the download still runs after {timeout_s:.0f} s"
        time.sleep(0.05)
    return job


def escaped(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if "escaped" in p.name]


def test_an_etag_that_names_a_path_makes_no_folder_and_ends_the_job(hub: FakeHub, tmp_path: Path):
    # Four levels up from the cache's blobs (and its locks) folder is tmp_path itself.
    hub.forged = {"X-Linked-Etag": '"../../../../escaped-by-etag/x"', "ETag": '"../../../../escaped-by-etag/x"'}
    downloads = Downloads()
    downloads.start(CHOICE, model_file())
    job = finished(downloads)
    assert job.state == "failed" and "ETag" in job.error, (job.state, job.error)
    shown = progress_html(downloads.all())  # what the Models panel shows
    assert re.search(r"failed \(try 1, \d\d:\d\d:\d\d\): .*ETag.* Resume tries again\.", shown), shown
    assert not escaped(tmp_path)
    assert not hub.downloads()  # not a byte was asked for


def test_a_commit_that_names_a_path_is_refused_before_the_download(hub: FakeHub, tmp_path: Path):
    hub.forged = {"X-Repo-Commit": "../../../../escaped-by-commit"}
    downloads = Downloads()
    downloads.start(CHOICE, model_file())
    job = finished(downloads)
    assert job.state == "failed" and "commit" in job.error, (job.state, job.error)
    assert not escaped(tmp_path) and not hub.downloads()


def test_a_file_name_that_leaves_the_snapshot_folder_is_refused(hub: FakeHub, tmp_path: Path):
    # A repo listing's name becomes a path: a backslash is a separator on Windows.
    name = "..\\..\\escaped-by-name.gguf"
    hub.add(REPO, name, DATA)
    with pytest.raises(DownloadError, match="not a plain path"):
        download_hub_file(REPO, name)
    assert not hub.requests and not escaped(tmp_path)


def test_a_good_answer_still_downloads_into_the_hub_cache_layout(hub: FakeHub, tmp_path: Path):
    downloads = Downloads()
    downloads.start(CHOICE, model_file())
    job = finished(downloads)
    assert job.state == "done", job.error
    sha = hashlib.sha256(DATA).hexdigest()
    cache = Path(os.environ["HF_HUB_CACHE"]) / "models--org--tiny-GGUF"
    assert job.path.read_bytes() == DATA and job.path.resolve() == cache / "blobs" / sha
    assert (cache / "refs" / "main").read_text() == job.path.parent.name  # the commit the snapshot is named by
    assert downloads.here(CHOICE, model_file()) == "downloaded"  # found again from the cache, as any hub tool would


def test_an_unexpected_failure_ends_the_job_with_its_reason(hub: FakeHub, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch):
    # A hub cache set under a plain file: creating its folders fails with an error no check foresaw.
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("HF_HUB_CACHE", str(blocker / "hub"))
    downloads = Downloads()
    downloads.start(CHOICE, model_file())
    job = finished(downloads)
    assert job.state == "failed" and "NotADirectoryError" in job.error, (job.state, job.error)
    shown = progress_html(downloads.all())
    assert re.search(r"failed \(try 1, \d\d:\d\d:\d\d\): NotADirectoryError: .*details\)\. Resume tries again\.", shown), shown
