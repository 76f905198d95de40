"""Hub downloads: the real huggingface_hub client against a local fake hub serving real GGUF bytes."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
from pathlib import Path

import pytest

from hub_server import COMMIT, FakeHub, serve_to_hub_client
from localchat.errors import DownloadError
from localchat.models import hub as hub_module
from localchat.models.catalog import load_catalog
from localchat.models.download import cached_file
from localchat.models.hub import download_hub_file, hub_file_info
from localchat.models.resolve import resolve_model

REPO, FILE = "org/tiny-GGUF", "tiny.Q8_0.gguf"
BIG_REPO, BIG_FILE = "org/SmolLM2-GGUF", "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def tiny_bytes(model_path: Path) -> bytes:
    """A small real GGUF (random weights, SmolLM2's tokenizer): about 8 MB."""
    from localchat.models.derive import random_weights_like

    return random_weights_like(model_path).read_bytes()


@pytest.fixture(scope="module")
def big_bytes(model_path: Path) -> bytes:
    """The real SmolLM2 file: bigger than the client's 10 MB read chunk, so a resume has something to keep."""
    return model_path.read_bytes()


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_bytes: bytes, big_bytes: bytes):
    """A fresh fake hub, HF_ENDPOINT pointing at it and a private hub cache."""
    fake = FakeHub(token="hf_secret")
    fake.add(REPO, FILE, tiny_bytes)
    fake.add(BIG_REPO, BIG_FILE, big_bytes)
    fake.add("org/gated-GGUF", FILE, tiny_bytes)
    fake.gated.add("org/gated-GGUF")
    yield from serve_to_hub_client(fake, tmp_path, monkeypatch)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_clean_download_reports_progress_and_lands_in_the_shared_hub_cache(hub: FakeHub, tiny_bytes: bytes):
    seen: list[tuple[int, int]] = []
    path = download_hub_file(REPO, FILE, progress=lambda done, total: seen.append((done, total)))
    assert path.read_bytes() == tiny_bytes
    assert path == Path(os.environ["HF_HUB_CACHE"]) / "models--org--tiny-GGUF" / "snapshots" / COMMIT / FILE
    assert path.resolve().name == sha(tiny_bytes)  # the blob is named by the hub's LFS sha256
    assert seen and seen[-1] == (len(tiny_bytes), len(tiny_bytes))
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    assert not list(path.resolve().parent.glob("*.incomplete"))

    # Other hub tools find the file where they expect it, and nothing is fetched again.
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    downloads = len(hub.downloads())
    assert try_to_load_from_cache(REPO, FILE, cache_dir=os.environ["HF_HUB_CACHE"]) == str(path)
    assert hf_hub_download(REPO, FILE, cache_dir=os.environ["HF_HUB_CACHE"], endpoint=hub.url) == str(path)
    assert download_hub_file(REPO, FILE) == path
    assert len(hub.downloads()) == downloads == 1


def test_a_connection_cut_mid_file_resumes_with_a_range_request(hub: FakeHub, big_bytes: bytes):
    hub.cut_once[BIG_FILE] = 35_000_000
    path = download_hub_file(BIG_REPO, BIG_FILE)
    first, second = hub.downloads()
    assert "range" not in first.headers
    offset = int(second.headers["range"].removeprefix("bytes=").rstrip("-"))
    assert 0 < offset <= 35_000_000  # only what had arrived whole is kept
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha(big_bytes)


def test_an_interrupted_download_resumes_on_the_next_run(hub: FakeHub, big_bytes: bytes):
    def stop_midway(done: int, total: int) -> None:
        if done >= 20_000_000:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        download_hub_file(BIG_REPO, BIG_FILE, progress=stop_midway)
    blobs = Path(os.environ["HF_HUB_CACHE"]) / "models--org--SmolLM2-GGUF" / "blobs"
    partial = blobs / f"{sha(big_bytes)}.incomplete"
    kept = partial.stat().st_size
    assert kept >= 20_000_000 and not (blobs / sha(big_bytes)).exists()

    seen: list[int] = []
    path = download_hub_file(BIG_REPO, BIG_FILE, progress=lambda done, total: seen.append(done))
    assert hub.downloads()[-1].headers["range"] == f"bytes={kept}-"
    assert seen[0] == kept  # progress starts from what was already there
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha(big_bytes)
    assert not partial.exists()


def test_a_server_that_ignores_range_restarts_the_file_cleanly(hub: FakeHub, tiny_bytes: bytes):
    blobs = Path(os.environ["HF_HUB_CACHE"]) / "models--org--tiny-GGUF" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"{sha(tiny_bytes)}.incomplete").write_bytes(tiny_bytes[:3_000_000])
    hub.ignore_range = True
    path = download_hub_file(REPO, FILE)
    assert hub.downloads()[0].headers["range"] == "bytes=3000000-"
    assert path.read_bytes() == tiny_bytes
    assert len(hub.downloads()) == 1  # the checksum restarted with the file: no refetch was needed


def test_a_corrupted_file_is_detected_deleted_and_fetched_again(hub: FakeHub, tiny_bytes: bytes,
                                                                caplog: pytest.LogCaptureFixture):
    hub.corrupt[FILE] = 1
    path = download_hub_file(REPO, FILE)
    assert len(hub.downloads()) == 2
    assert path.read_bytes() == tiny_bytes
    assert "failed its checksum" in caplog.text


def test_a_file_corrupted_twice_is_an_error_and_leaves_nothing_behind(hub: FakeHub):
    hub.corrupt[FILE] = 2
    with pytest.raises(DownloadError, match="checksum twice"):
        download_hub_file(REPO, FILE)
    repo_dir = Path(os.environ["HF_HUB_CACHE"]) / "models--org--tiny-GGUF"
    assert not [p for p in (repo_dir / "blobs").iterdir()]
    assert not (repo_dir / "snapshots").exists()


def test_a_catalog_checksum_the_hub_does_not_have_stops_before_downloading(hub: FakeHub):
    with pytest.raises(DownloadError, match="catalog expects"):
        download_hub_file(REPO, FILE, sha256="0" * 64)
    assert hub.downloads() == []


def test_a_missing_file_is_a_404_that_names_repo_and_file(hub: FakeHub):
    with pytest.raises(DownloadError, match=r"org/tiny-GGUF has no file 'nope.gguf'.*\(404\).*Check the file name"):
        download_hub_file(REPO, "nope.gguf")
    with pytest.raises(DownloadError, match=r"no repo 'org/missing'.*Check the repo name"):
        download_hub_file("org/missing", FILE)


def test_a_gated_repo_says_to_accept_the_license_and_set_hf_token(hub: FakeHub, monkeypatch: pytest.MonkeyPatch,
                                                                  tiny_bytes: bytes):
    with pytest.raises(DownloadError, match=r"gated model \(the hub answered 401\).*accept its license.*HF_TOKEN"):
        download_hub_file("org/gated-GGUF", FILE)
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    with pytest.raises(DownloadError, match=r"gated model \(the hub answered 403\)"):
        download_hub_file("org/gated-GGUF", FILE)
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    assert download_hub_file("org/gated-GGUF", FILE).read_bytes() == tiny_bytes
    # The token opens the hub, but is never sent to the CDN host.
    assert "authorization" not in hub.downloads()[-1].headers


def test_an_unreachable_hub_says_to_check_the_network(hub: FakeHub, monkeypatch: pytest.MonkeyPatch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed}")
    with pytest.raises(DownloadError, match=r"cannot reach the model hub at http://127\.0\.0\.1.*Check the network"):
        download_hub_file(REPO, FILE)


def test_too_little_disk_space_is_refused_before_downloading(hub: FakeHub, monkeypatch: pytest.MonkeyPatch):
    real = shutil.disk_usage
    monkeypatch.setattr(hub_module.shutil, "disk_usage", lambda p: real(p)._replace(free=50_000_000))
    with pytest.raises(DownloadError) as caught:
        download_hub_file(REPO, FILE)
    message = str(caught.value)
    assert "not enough disk space" in message and "needs 277 MB" in message and "only 50 MB is free" in message
    assert os.environ["HF_HUB_CACHE"] in message and "HF_HUB_CACHE" in message
    assert hub.downloads() == []


def test_hub_metadata_gives_size_and_sha256(hub: FakeHub, tiny_bytes: bytes):
    info = hub_file_info(REPO, FILE)
    assert (info.size, info.sha256, info.commit) == (len(tiny_bytes), sha(tiny_bytes), COMMIT)
    assert info.url.startswith(hub.cdn_url)


@pytest.mark.parametrize("listed", ["exact", "rounded"])
def test_a_hub_only_catalog_entry_without_sha256_is_pulled_and_then_found_cached(hub: FakeHub, tmp_path: Path,
                                                                                 tiny_bytes: bytes, listed: str):
    # "rounded": an unverified entry whose size is the hub listing's rounded figure, not the file's.
    size, verified = (len(tiny_bytes), "true") if listed == "exact" else (len(tiny_bytes) + 1000, "false")
    catalog_file = tmp_path / "models.yaml"
    catalog_file.write_text(f"""
models:
  tiny:
    name: Tiny
    family: tiny
    license: apache-2.0
    default_quant: Q8_0
    architecture: {{arch: llama, n_layer: 2, n_head_kv: 2}}
    files:
      Q8_0:
        file: {FILE}
        size: {size}
        sources:
          - hub: {{repo: {REPO}, file: {FILE}, verified: {verified}}}
""")
    catalog = load_catalog(catalog_file)
    assert catalog["tiny"].file_for(None).sha256 is None
    seen: list[int] = []
    path = resolve_model("tiny", catalog=catalog, progress=lambda done, total: seen.append(done))
    assert path.read_bytes() == tiny_bytes and seen[-1] == len(tiny_bytes)
    assert cached_file(catalog["tiny"].file_for(None)) == path
    assert resolve_model("tiny:q8_0", catalog=catalog) == path
    assert len(hub.downloads()) == 1
