"""OpenAI's wire formats shared by every route: error objects and server-sent events."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse

from ..errors import (AuthError, BackendError, ContextOverflowError, EngineError, LocalchatError,
                      ModelNotFoundError, PayloadTooLargeError, RequestError)


# Python's JSON parser and pydantic both stop at about a thousand levels, with a RecursionError.
TOO_DEEP = "the request body nests too deeply; send a flat JSON object."


def error_body(message: str, kind: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(status: int, message: str, kind: str = "invalid_request_error",
                   param: str | None = None, code: str | None = None) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(error_body(message, kind, param, code), status_code=status, headers=headers)


def error_from(exc: LocalchatError) -> JSONResponse:
    """The HTTP status and OpenAI error object for one of our errors."""
    message = str(exc)
    if isinstance(exc, ContextOverflowError):
        return error_response(400, message, param=exc.param, code="context_length_exceeded")
    if isinstance(exc, PayloadTooLargeError):
        return error_response(413, message, code="payload_too_large")
    if isinstance(exc, RequestError):
        return error_response(400, message, param=exc.param, code="invalid_value" if exc.param else None)
    if isinstance(exc, ModelNotFoundError):
        return error_response(404, message, param="model", code="model_not_found")
    if isinstance(exc, AuthError):
        return error_response(401, message, code="invalid_api_key")
    if isinstance(exc, BackendError):
        return error_response(502, message, kind="api_error", code="backend_unavailable")
    if isinstance(exc, EngineError):
        return error_response(500, message, kind="server_error", code="engine_error")
    return error_response(500, message, kind="server_error")


def sse(obj: dict[str, Any]) -> bytes:
    """One server-sent event carrying a JSON object."""
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"
