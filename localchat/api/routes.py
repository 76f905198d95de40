"""The API's routes as one FastAPI router, for `localchat serve` and for the window's own app: every
protocol's routes (api/protocols/), each behind the same guard (api/guard.py).

A local Service answers them; a --backend proxy forwards each one, as it came, to the backend.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Protocol

from fastapi import APIRouter
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response

from .guard import guarded, read_json
from .protocols import anthropic, ollama, openai, openai_responses
from .service import Route, Service
from .wire import error_response

ROUTES: list[Route] = [*openai.ROUTES, *openai_responses.ROUTES, *anthropic.ROUTES, *ollama.ROUTES]


class Forwarder(Protocol):
    """Another server that answers every route itself (api/proxy.py: ProxyService, for --backend)."""

    async def forward(self, request: HTTPRequest) -> Response: ...
    async def aclose(self) -> None: ...


def build_router(service: Service | Forwarder, api_key: str | None = None) -> APIRouter:
    """Every protocol's routes, answered by `service`; with `api_key`, each one needs it."""
    router = APIRouter()
    for route in ROUTES:
        router.add_api_route(route.path, _endpoint(route, service, api_key), methods=[route.method],
                             include_in_schema=False)
    for prefix in ("/v1", "/api"):
        router.add_api_route(prefix + "/{path:path}", _unknown(prefix, api_key), include_in_schema=False,
                             methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    return router


def _endpoint(route: Route, service: Any, api_key: str | None) -> Callable[[HTTPRequest], Awaitable[Response]]:
    forward = getattr(service, "forward", None)

    async def endpoint(request: HTTPRequest) -> Response:
        async def handle() -> Response:
            data = await read_json(request) if route.method == "POST" else None
            if forward is not None:  # read first: the body limit and the JSON check hold for the backend too
                return await forward(request)
            return await route.handle(service, data, request)
        return await guarded(request, api_key, handle)

    return endpoint


def _unknown(prefix: str, api_key: str | None) -> Callable[[HTTPRequest], Awaitable[Response]]:
    offered = [f"{r.method} {r.path}" for r in ROUTES if r.path.startswith(prefix + "/") and "{" not in r.path]
    listed = ", ".join(offered[:-1]) + f" and {offered[-1]}"

    async def unknown(request: HTTPRequest) -> Response:
        async def handle() -> Response:
            return error_response(404, f"there is no {request.method} {request.url.path} here; this server offers "
                                  f"{listed}.", code="unknown_url", path=request.url.path)
        return await guarded(request, api_key, handle)

    return unknown
