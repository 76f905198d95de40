"""What every API route does before and around its work: the key, the bounded body, errors as answers.

Every route parses its own body and turns every failure into an error object of its own protocol
here, so the routes behave the same on any app that includes them, whatever that app's exception
handlers are.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any, Awaitable, Callable

from starlette.requests import Request as HTTPRequest
from starlette.responses import Response

from ..errors import AuthError, LocalchatError, PayloadTooLargeError, RequestError
from .json_values import JSONUnreadable, json_value
from .wire import error_from, error_response

log = logging.getLogger(__name__)

# Chat bodies carry whole documents; beyond this, a body is a mistake or an attack.
MAX_BODY_BYTES = 64 * 1024 * 1024


def check_key(request: HTTPRequest, api_key: str | None) -> None:
    """Raise AuthError unless the request carries the key: `Authorization: Bearer KEY`, or `x-api-key: KEY`
    (Anthropic's clients send that)."""
    if not api_key:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    given = token.strip() if scheme.lower() == "bearer" else request.headers.get("x-api-key", "").strip()
    # compare_digest takes the same time wherever the strings differ: no guessing byte by byte.
    if not hmac.compare_digest(given.encode(), api_key.encode()):
        raise AuthError("missing or wrong API key; send the server's key as 'Authorization: Bearer KEY' "
                        "(or as 'x-api-key: KEY').")


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
        data = json_value(body)
        # JSON may spell a lone UTF-16 surrogate (\ud800), which no UTF-8 text can hold.
        if b"\\u" in body:
            json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a ValueError too: before JSONUnreadable's
        raise RequestError("the request body holds a lone UTF-16 surrogate (such as \\ud800), which is not "
                           "text; send valid Unicode.") from None
    except JSONUnreadable as exc:  # not JSON, nested past MAX_DEPTH, or an integer Python will not read
        raise RequestError(f"the request body {exc}.") from None
    return data


async def guarded(request: HTTPRequest, api_key: str | None, handle: Callable[[], Awaitable[Response]]) -> Response:
    """handle() once the key is checked; any failure becomes an error object in the route's protocol."""
    path = request.url.path
    try:
        check_key(request, api_key)
        return await handle()
    except LocalchatError as exc:
        return error_from(exc, path)
    except Exception:  # a bug must still answer in the client's language, and be logged here
        log.exception("the API failed on %s %s", request.method, path)
        return error_response(500, "internal server error; the server log has the details.", "server_error",
                              path=path)
