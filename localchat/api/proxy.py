"""The API served by another OpenAI-compatible server (vLLM, llama-server, another localchat)."""

from __future__ import annotations

from typing import Any, AsyncIterator
from urllib.parse import quote

import anyio
import httpx
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response, StreamingResponse

from ..errors import BackendError, ConfigError
from .local import STREAM_HEADERS
from .wire import error_body, sse

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
    """Forwards /v1 requests unchanged and relays the answers, streams included."""

    def __init__(self, url: str, api_key: str | None = None, forward_client_auth: bool = False) -> None:
        self.base = backend_base(url)
        self.api_key = api_key
        # Without a key of our own, a client's bearer token is meant for the backend: pass it on.
        self.forward_client_auth = forward_client_auth
        self.client = httpx.AsyncClient(base_url=self.base, timeout=TIMEOUT)

    async def models(self, request: HTTPRequest) -> Response:
        return await self._forward(request, "GET", "/v1/models", b"", stream=False)

    async def model(self, model_id: str, request: HTTPRequest) -> Response:
        return await self._forward(request, "GET", f"/v1/models/{quote(model_id, safe='/')}", b"", stream=False)

    async def chat(self, data: Any, request: HTTPRequest) -> Response:
        # The client's own bytes go on: whatever fields the backend understands and we do not.
        body = await request.body()
        return await self._forward(request, "POST", "/v1/chat/completions", body, _wants_stream(data))

    async def completions(self, data: Any, request: HTTPRequest) -> Response:
        body = await request.body()
        return await self._forward(request, "POST", "/v1/completions", body, _wants_stream(data))

    async def embeddings(self, data: Any, request: HTTPRequest) -> Response:
        return await self._forward(request, "POST", "/v1/embeddings", await request.body(), stream=False)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def _forward(self, request: HTTPRequest, method: str, path: str, body: bytes, stream: bool) -> Response:
        headers = {"Accept": "text/event-stream" if stream else "application/json"}
        if body:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        elif self.forward_client_auth and "authorization" in request.headers:
            headers["Authorization"] = request.headers["authorization"]
        upstream = self.client.build_request(method, path, content=body or None, headers=headers)
        try:
            response = await self.client.send(upstream, stream=True)
        except httpx.HTTPError as exc:
            raise BackendError(f"the backend at {self.base} did not answer ({exc.__class__.__name__}: {exc}); "
                               "check that it is running and that --backend points at it.") from None
        media_type = response.headers.get("content-type", "application/json")
        if not stream or response.status_code != 200:
            try:
                content = await response.aread()
            except httpx.HTTPError as exc:
                raise BackendError(f"the backend at {self.base} broke off its answer ({exc}); try again.") from None
            finally:
                await response.aclose()
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


def _wants_stream(data: Any) -> bool:
    return isinstance(data, dict) and data.get("stream") is True
