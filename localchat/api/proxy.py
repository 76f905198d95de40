"""The API served by another server (vLLM, llama-server, Ollama, another localchat): every route forwarded."""

from __future__ import annotations

import json
from typing import AsyncIterator
from urllib.parse import quote

import anyio
import httpx
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response, StreamingResponse

from ..errors import BackendError, ConfigError
from .service import STREAM_HEADERS
from .wire import error_body, sse

# Media types of streamed answers: OpenAI's and Anthropic's server-sent events, Ollama's JSON lines.
STREAMED = ("text/event-stream", "application/x-ndjson")

# Answers can take minutes (a long document's prefill sends nothing); connecting should not.
TIMEOUT = httpx.Timeout(connect=10.0, read=900.0, write=60.0, pool=60.0)


def backend_base(url: str) -> str:
    """The server root of a backend URL given with or without its /v1."""
    parsed = httpx.URL(url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"--backend {url!r} is not an http(s) URL; give one like http://127.0.0.1:8080/v1.")
    base = str(parsed.copy_with(query=None, fragment=None)).rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


class ProxyService:
    """Forwards every route's request unchanged and relays the answers, streams included."""

    def __init__(self, url: str, api_key: str | None = None, forward_client_auth: bool = False) -> None:
        self.base = backend_base(url)
        self.api_key = api_key
        # Without a key of our own, a client's key is meant for the backend: pass it on.
        self.forward_client_auth = forward_client_auth
        self.client = httpx.AsyncClient(base_url=self.base, timeout=TIMEOUT)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def forward(self, request: HTTPRequest) -> Response:
        """The request (its body already read, and checked to be JSON) sent to the same path on the backend."""
        # The client's own bytes go on: whatever fields the backend understands and we do not.
        body = await request.body()
        headers = {"Accept": request.headers.get("accept", "*/*")}
        if body:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        elif self.forward_client_auth:
            headers |= {name: request.headers[name] for name in ("authorization", "x-api-key")
                        if name in request.headers}
        headers |= {name: request.headers[name] for name in request.headers if name.startswith("anthropic-")}
        path = quote(request.url.path, safe="/")
        upstream = self.client.build_request(request.method, path, content=body or None, headers=headers)
        try:
            response = await self.client.send(upstream, stream=True)
        except httpx.HTTPError as exc:
            raise BackendError(f"the backend at {self.base} did not answer ({exc.__class__.__name__}: {exc}); "
                               "check that it is running and that --backend points at it.") from None
        media_type = response.headers.get("content-type", "application/json")
        if response.status_code != 200 or not media_type.startswith(STREAMED):
            try:
                content = await response.aread()
            except httpx.HTTPError as exc:
                raise BackendError(f"the backend at {self.base} broke off its answer ({exc}); try again.") from None
            finally:
                await response.aclose()
            if response.status_code == 404 and not _is_error_object(content):
                raise BackendError(f"the backend at {self.base} does not offer {request.method} {request.url.path} "
                                   "(it answered 404); it may not speak this protocol: serve a local model "
                                   "to have it answered here.")
            return Response(content, status_code=response.status_code, media_type=media_type)
        return StreamingResponse(_relay(response), status_code=200, media_type=media_type, headers=STREAM_HEADERS)


async def _relay(response: httpx.Response) -> AsyncIterator[bytes]:
    """The backend's bytes as they come; closing the upstream when our client leaves stops its work."""
    try:
        async for chunk in response.aiter_bytes():
            yield chunk
    except httpx.HTTPError as exc:
        message = f"the backend broke off the stream ({exc.__class__.__name__}); try again."
        yield sse(error_body(message, "api_error", None, "backend_unavailable"))
    finally:
        # A disconnect arrives as cancellation; without the shield, closing would be cancelled too.
        with anyio.CancelScope(shield=True):
            await response.aclose()


def _is_error_object(content: bytes) -> bool:
    """Whether a body is an API's error object (a model not found, say), not a web server's bare 404."""
    try:
        data = json.loads(content)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and "error" in data
