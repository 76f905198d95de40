"""The OpenAI-compatible API as a FastAPI router, for `localchat serve` and for the UI's own app.

Every route parses its own body and turns every failure into an OpenAI error object here, so the
router behaves the same on any app that includes it, whatever that app's exception handlers are.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any, Awaitable, Callable, Protocol

from fastapi import APIRouter
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response

from ..errors import AuthError, LocalchatError, PayloadTooLargeError, RequestError
from .wire import TOO_DEEP, error_from, error_response

log = logging.getLogger(__name__)

# Chat bodies carry whole documents; beyond this, a body is a mistake or an attack.
MAX_BODY_BYTES = 64 * 1024 * 1024


class Service(Protocol):
    """What answers the routes: a local engine (LocalService) or another server (ProxyService)."""

    async def models(self, request: HTTPRequest) -> Response: ...
    async def model(self, model_id: str, request: HTTPRequest) -> Response: ...
    async def chat(self, data: Any, request: HTTPRequest) -> Response: ...
    async def completions(self, data: Any, request: HTTPRequest) -> Response: ...
    async def embeddings(self, data: Any, request: HTTPRequest) -> Response: ...
    async def aclose(self) -> None: ...


def check_key(request: HTTPRequest, api_key: str | None) -> None:
    """Raise AuthError unless the request carries `Authorization: Bearer <api_key>`."""
    if not api_key:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    # compare_digest takes the same time wherever the strings differ: no guessing byte by byte.
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
        raise AuthError("missing or wrong API key; send the server's key as 'Authorization: Bearer KEY'.")


async def read_body(request: HTTPRequest, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body, counted as it arrives: a chunked body has no Content-Length to trust."""
    too_large = PayloadTooLargeError(f"the request body is over the {limit / 1e6:.0f} MB limit; send less "
                                     "(attach long documents in the window, or send only the part you need).")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body  # Starlette's cache: request.body() now returns it (the proxy forwards it as sent)
    return body


async def read_json(request: HTTPRequest) -> Any:
    """The request body as JSON, or a RequestError that says what is wrong with it."""
    body = await read_body(request)
    if not body:
        raise RequestError("the request has no body; send a JSON object.")
    try:
        data = json.loads(body)
        # JSON may spell a lone UTF-16 surrogate (\ud800), which no UTF-8 text can hold.
        if b"\\u" in body:
            json.dumps(data, ensure_ascii=False).encode("utf-8")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"the request body is not valid JSON ({exc}).") from None
    except UnicodeEncodeError:
        raise RequestError("the request body holds a lone UTF-16 surrogate (such as \\ud800), which is not "
                           "text; send valid Unicode.") from None
    except RecursionError:
        raise RequestError(TOO_DEEP) from None
    return data


def build_router(service: Service, api_key: str | None = None, prefix: str = "/v1") -> APIRouter:
    """The /v1 routes answered by `service`; with `api_key`, each one needs it as a bearer token."""
    router = APIRouter(prefix=prefix)

    async def guarded(request: HTTPRequest, handle: Callable[[], Awaitable[Response]]) -> Response:
        try:
            check_key(request, api_key)
            return await handle()
        except LocalchatError as exc:
            return error_from(exc)
        except Exception:  # a bug must still answer in the client's language, and be logged here
            log.exception("the API failed on %s %s", request.method, request.url.path)
            return error_response(500, "internal server error; the server log has the details.", "server_error")

    @router.get("/models")
    async def list_models(request: HTTPRequest) -> Response:
        return await guarded(request, lambda: service.models(request))

    @router.get("/models/{model_id:path}")
    async def get_model(request: HTTPRequest, model_id: str) -> Response:
        return await guarded(request, lambda: service.model(model_id, request))

    @router.post("/chat/completions")
    async def chat_completions(request: HTTPRequest) -> Response:
        async def handle() -> Response:
            return await service.chat(await read_json(request), request)
        return await guarded(request, handle)

    @router.post("/completions")
    async def completions(request: HTTPRequest) -> Response:
        async def handle() -> Response:
            return await service.completions(await read_json(request), request)
        return await guarded(request, handle)

    @router.post("/embeddings")
    async def embeddings(request: HTTPRequest) -> Response:
        async def handle() -> Response:
            return await service.embeddings(await read_json(request), request)
        return await guarded(request, handle)

    @router.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
    async def unknown(request: HTTPRequest, path: str) -> Response:
        async def handle() -> Response:
            return error_response(404, f"there is no {request.method} {request.url.path} here; this server offers "
                                  f"GET {prefix}/models, POST {prefix}/chat/completions, POST {prefix}/completions and "
                                  f"POST {prefix}/embeddings.",
                                  code="unknown_url")
        return await guarded(request, handle)

    return router
