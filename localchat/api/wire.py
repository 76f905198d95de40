"""The wire formats shared by every route: error objects (in each protocol's own shape) and server-sent
events."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse

from ..errors import (AuthError, BackendError, ContextOverflowError, EngineError, LocalchatError,
                      ModelNotFoundError, NoRoomError, PayloadTooLargeError, RequestError, StoreError,
                      ToolServerError)


# Python's JSON parser and pydantic both stop at about a thousand levels, with a RecursionError.
TOO_DEEP = "the request body nests too deeply; send a flat JSON object."


def error_body(message: str, kind: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


# Anthropic names an error by its kind, one per HTTP status.
ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 415: "invalid_request_error",
                    429: "rate_limit_error", 529: "overloaded_error"}


def dialect(path: str) -> str:
    """The protocol whose error shape a path answers in: ollama (/api/...), anthropic (/v1/messages...)
    or openai (the rest). The origin guard answers in it too, before any route runs."""
    if path == "/api" or path.startswith("/api/"):
        return "ollama"
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return "anthropic"
    return "openai"


def shaped_error(path: str, status: int, message: str, kind: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """An error object in the shape the protocol of `path` uses."""
    spoken = dialect(path)
    if spoken == "ollama":
        return {"error": message}
    if spoken == "anthropic":
        return {"type": "error", "error": {"type": ANTHROPIC_ERRORS.get(status, "api_error"), "message": message}}
    return error_body(message, kind, param, code)


def error_response(status: int, message: str, kind: str = "invalid_request_error",
                   param: str | None = None, code: str | None = None, path: str = "") -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(shaped_error(path, status, message, kind, param, code), status_code=status, headers=headers)


def error_from(exc: LocalchatError, path: str = "") -> JSONResponse:
    """The HTTP status and error object (in the shape of `path`'s protocol) for one of our errors."""
    message = str(exc)
    if isinstance(exc, ContextOverflowError):
        return error_response(400, message, param=exc.param, code="context_length_exceeded", path=path)
    if isinstance(exc, PayloadTooLargeError):
        return error_response(413, message, code="payload_too_large", path=path)
    if isinstance(exc, RequestError):
        return error_response(400, message, param=exc.param, code="invalid_value" if exc.param else None, path=path)
    if isinstance(exc, ModelNotFoundError):
        return error_response(404, message, param="model", code="model_not_found", path=path)
    if isinstance(exc, NoRoomError):
        return error_response(503, message, kind="server_error", code="no_room_for_model", path=path)
    if isinstance(exc, AuthError):
        return error_response(401, message, code="invalid_api_key", path=path)
    if isinstance(exc, ToolServerError):  # OpenAI's status for an MCP server it cannot reach
        return error_response(424, message, code="mcp_server_unavailable", param="tools", path=path)
    if isinstance(exc, BackendError):
        return error_response(502, message, kind="api_error", code="backend_unavailable", path=path)
    if isinstance(exc, StoreError):  # 507 Insufficient Storage: the server's disk, not the request
        return error_response(507, message, kind="server_error", code="store_unavailable", path=path)
    if isinstance(exc, EngineError):
        return error_response(500, message, kind="server_error", code="engine_error", path=path)
    return error_response(500, message, kind="server_error", path=path)


def sse(obj: dict[str, Any]) -> bytes:
    """One server-sent event carrying a JSON object."""
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"
