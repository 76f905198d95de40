"""A local stand-in for the model hub: enough of its HTTP API for huggingface_hub downloads and searches
(list_models, model_info with file metadata, list_repo_files), plus fault injection.

Like the real hub, a file's `resolve` URL answers with a redirect to a CDN host (here a second port, so the
client treats it as another origin) and carries the file's metadata in X-Repo-Commit, X-Linked-Etag (the
LFS sha256) and X-Linked-Size. The CDN serves the bytes, with Range support.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

COMMIT = "5f0e1d2c3b4a59687766554433221100ffeeddcc"


@dataclass(slots=True)
class Seen:
    """One request the fake hub received."""

    method: str
    path: str
    headers: dict[str, str]


@dataclass(slots=True)
class FakeHub:
    """Repos and files to serve, the faults to inject, and a log of every request."""

    token: str | None = None  # the token that opens gated repos
    files: dict[tuple[str, str], bytes] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)
    cut_once: dict[str, int] = field(default_factory=dict)  # file name -> bytes sent before the connection drops
    corrupt: dict[str, int] = field(default_factory=dict)  # file name -> how many next bodies get a flipped byte
    ignore_range: bool = False  # answer 200 with the whole file to Range requests, as some proxies do
    # Sizes the repo listing reports instead of the bytes' length: a big file's size without its bytes.
    listed_sizes: dict[tuple[str, str], int] = field(default_factory=dict)
    downloads_of: dict[str, int] = field(default_factory=dict)  # repo -> its download count in the search listing
    down: bool = False  # drop every connection unanswered, as an unreachable hub looks to the client
    bytes_per_s: int = 0  # a slow network: file bodies trickle at this rate (0: as fast as the socket goes)
    # Headers that replace the real ones in every file's metadata answer: a hostile hub, mirror or proxy.
    forged: dict[str, str] = field(default_factory=dict)
    requests: list[Seen] = field(default_factory=list)
    _sha: dict[tuple[str, str], str] = field(default_factory=dict)
    _servers: list[ThreadingHTTPServer] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, repo: str, filename: str, data: bytes) -> str:
        """Serve `data` as `repo`/`filename`; returns its sha256."""
        self.files[(repo, filename)] = data
        sha = hashlib.sha256(data).hexdigest()
        self._sha[(repo, filename)] = sha
        return sha

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._servers[0].server_address[1]}"

    @property
    def cdn_url(self) -> str:
        return f"http://127.0.0.1:{self._servers[1].server_address[1]}"

    def start(self) -> FakeHub:
        handler = type("Handler", (_Handler,), {"hub": self})
        for _ in range(2):  # the hub API, then the CDN
            server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
            self._servers.append(server)
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def downloads(self) -> list[Seen]:
        """The GET requests for file bytes (the CDN side)."""
        return [seen for seen in self.requests if seen.method == "GET" and seen.path.startswith("/cdn/")]

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self.requests.append(seen)

    def _take_fault(self, filename: str) -> tuple[int | None, bool]:
        with self._lock:
            cut = self.cut_once.pop(filename, None)
            corrupt = self.corrupt.get(filename, 0) > 0
            if corrupt:
                self.corrupt[filename] -= 1
        return cut, corrupt


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet test output
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionResetError, BrokenPipeError):
            pass  # the client gave up mid-reply (an interrupted download): nothing to report

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    def _route(self, head: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        self.hub._record(Seen(self.command, path, {k.lower(): v for k, v in self.headers.items()}))
        if self.hub.down:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        parts = path.strip("/").split("/")
        if parts == ["api", "models"]:
            return self._search(parse_qs(urlsplit(self.path).query))
        if parts[0] == "cdn" and len(parts) == 2:
            return self._serve_bytes(parts[1], head)
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            return self._api(f"{parts[2]}/{parts[3]}", parts[4:])
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve(f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]))
        self._reply(404, headers={"X-Error-Code": "RepoNotFound"})

    def _repo_refusal(self, repo: str) -> tuple[int, dict[str, str]] | None:
        if not any(r == repo for r, _ in self.hub.files):
            return 401, {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"}
        if repo in self.hub.gated and self.headers.get("Authorization") != f"Bearer {self.hub.token}":
            status = 403 if self.headers.get("Authorization") else 401
            return status, {"X-Error-Code": "GatedRepo",
                            "X-Error-Message": f"Access to model {repo} is restricted."}
        return None

    def _resolve(self, repo: str, revision: str, filename: str) -> None:
        refusal = self._repo_refusal(repo)
        if refusal:
            return self._reply(refusal[0], headers=refusal[1])
        if revision not in ("main", COMMIT):
            return self._reply(404, headers={"X-Error-Code": "RevisionNotFound"})
        data = self.hub.files.get((repo, filename))
        if data is None:
            return self._reply(404, headers={"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT})
        sha = self.hub._sha[(repo, filename)]
        self._reply(302, headers={
            "Location": f"{self.hub.cdn_url}/cdn/{sha}?name={filename}",
            "X-Repo-Commit": COMMIT, "ETag": f'"{sha}"', "X-Linked-Etag": f'"{sha}"',
            "X-Linked-Size": str(len(data)), "Accept-Ranges": "bytes", **self.hub.forged,
        })

    def _serve_bytes(self, sha: str, head: bool) -> None:
        key = next((key for key, known in self.hub._sha.items() if known == sha), None)
        if key is None:
            return self._reply(404)
        filename, data = key[1], self.hub.files[key]
        start, end = 0, len(data) - 1
        status, headers = 200, {"ETag": f'"{sha}"', "Accept-Ranges": "bytes"}
        wanted = self.headers.get("Range")
        if wanted and wanted.startswith("bytes=") and not self.hub.ignore_range:
            first, _, last = wanted[len("bytes="):].partition("-")
            start, end = int(first), int(last) if last else len(data) - 1
            if start >= len(data):
                return self._reply(416, headers={"Content-Range": f"bytes */{len(data)}"})
            status, headers["Content-Range"] = 206, f"bytes {start}-{end}/{len(data)}"
        body = data[start:end + 1]
        if head:
            return self._reply(status, headers=headers, length=len(body))
        cut, corrupt = self.hub._take_fault(filename)
        if corrupt:
            middle = len(body) // 2
            body = body[:middle] + bytes([body[middle] ^ 0xFF]) + body[middle + 1:]
        if cut is None and self.hub.bytes_per_s:
            return self._trickle(status, body, headers)
        if cut is None:
            return self._reply(status, body, headers)
        # Promise the whole body, send part of it, then drop the connection: a network failure mid-file.
        self._reply(status, body[:cut], headers, length=len(body))
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def _trickle(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self._reply(status, headers=headers, length=len(body))
        step = max(self.hub.bytes_per_s // 20, 1)
        for start in range(0, len(body), step):
            self.wfile.write(body[start:start + step])
            self.wfile.flush()
            time.sleep(0.05)

    def _api(self, repo: str, rest: list[str]) -> None:
        refusal = self._repo_refusal(repo)
        if refusal:
            return self._reply(refusal[0], headers=refusal[1])
        files = [(name, data) for (r, name), data in self.hub.files.items() if r == repo]

        def lfs(data: bytes) -> dict[str, object]:
            return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}

        if rest[:1] == ["tree"]:
            payload: object = [{"type": "file", "path": name, "size": len(data), "oid": "0" * 40,
                                "lfs": {**lfs(data), "oid": lfs(data)["sha256"]}} for name, data in files]
        else:  # /api/models/{repo} and /api/models/{repo}/revision/{rev}
            payload = {"id": repo, "modelId": repo, "sha": COMMIT, "private": False,
                       "gated": "manual" if repo in self.hub.gated else False,
                       "siblings": [{"rfilename": name, "size": self.hub.listed_sizes.get((repo, name), len(data)),
                                     "lfs": lfs(data)} for name, data in files]}
        self._reply(200, json.dumps(payload).encode(), {"Content-Type": "application/json"})

    def _search(self, query: dict[str, list[str]]) -> None:
        """The model listing (`list_models`): repos whose id holds every word searched for, those with a
        file of each filter's kind (gguf), the most downloaded first; one page (no Link header)."""
        words = " ".join(query.get("search", [])).lower().split()
        kinds = [f".{kind.lower()}" for kind in query.get("filter", [])]
        repos = sorted({r for r, _ in self.hub.files}, key=lambda r: (-self.hub.downloads_of.get(r, 0), r))
        found = [r for r in repos if all(w in r.lower() for w in words)
                 and all(any(n.lower().endswith(k) for rr, n in self.hub.files if rr == r) for k in kinds)]
        limit = int(query.get("limit", ["1000"])[0])
        payload = [{"_id": f"{i:024x}", "id": r, "modelId": r, "downloads": self.hub.downloads_of.get(r, 0),
                    "likes": 0, "private": False, "tags": ["gguf"] if kinds else []}
                   for i, r in enumerate(found[:limit])]
        self._reply(200, json.dumps(payload).encode(), {"Content-Type": "application/json"})

    def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
               length: int | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)


def serve_to_hub_client(fake: FakeHub, home: Path, monkeypatch: Any) -> Iterator[FakeHub]:
    """Run `fake` and point huggingface_hub at it for one test: its cache under `home`, no token
    from the environment, no telemetry (a fixture body: `yield from serve_to_hub_client(...)`)."""
    env = {"HF_HOME": home / "hf", "HF_HUB_CACHE": home / "hf" / "hub", "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_XET": "1"}
    for key, value in env.items():
        monkeypatch.setenv(key, str(value))
    for key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(key, raising=False)
    with fake:
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        yield fake
