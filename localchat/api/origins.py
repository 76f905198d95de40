"""Who may talk to the server: requests that name it, from itself or from no browser at all.

Any web page the user opens can make the browser send requests to 127.0.0.1. Two ways in are
closed here, in front of the API and the window alike:

* DNS rebinding: a hostile name that resolves to 127.0.0.1 arrives with that name in `Host`.
  Only the names of this server are served (on loopback; a server opened with --listen is
  guarded by its key instead).
* Cross-site requests: a page's form or fetch arrives with its own `Origin` (and, in current
  browsers, `Sec-Fetch-Site: cross-site`). A state-changing request is served only from this
  server's own pages, from an origin named with --cors-origin, or from no browser at all; an API
  POST must be JSON, which a page cannot send to another origin without a CORS preflight. (Ollama's
  routes, /api/..., also take a body sent as a form by a program with no browser marks at all,
  as `curl -d` sends it: Ollama's own examples do.)

CORS stays off unless an origin is named; then Starlette's CORSMiddleware answers for it. No other
origin gets a CORS header from anything behind the guard (the window's own framework answers any
localhost origin, with credentials): a page elsewhere on this machine cannot read what GET returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit

from .wire import error_response

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_SAME = frozenset({"same-origin", "none"})  # none: typed into the address bar, a bookmark
# Headers every current browser sends with a page's request; a program (curl, a script) sends none of them.
_BROWSER_MARKS = ("origin", "referer", "sec-fetch-site", "sec-fetch-mode", "sec-fetch-dest")
_PROGRAM_FORMS = frozenset({"", "application/x-www-form-urlencoded"})  # what `curl -d` sends, or none at all

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Callable, Callable], Awaitable[None]]


@dataclass(slots=True, frozen=True)
class OriginPolicy:
    """The Host names this server answers to and the browser origins it serves."""

    names: tuple[str, ...] = LOOPBACK_NAMES  # host names, without port
    port: int | None = None  # None: any port (a test server on a port the OS picked)
    any_host: bool = False  # --listen: the API key, not the name, guards the server
    cors_origins: tuple[str, ...] = ()  # e.g. "http://localhost:3000"
    also_ports: tuple[int, ...] = ()  # more listeners of the same app (--ollama-port)

    def host_ok(self, host: str) -> bool:
        """Whether a Host header (name[:port]) names this server."""
        if self.any_host:
            return True
        name, port = split_host(host)
        if name not in self.names:
            return False
        if self.port is None:
            return True
        ports = {str(p) for p in (self.port, *self.also_ports)}
        return port in ports or (port == "" and "80" in ports)

    def origin_ok(self, origin: str, host: str) -> bool:
        """Whether a browser page at `origin` may change things here: this server's own page, or a named one."""
        if origin in self.cors_origins:
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower() and self.host_ok(host)


def split_host(host: str) -> tuple[str, str]:
    """("name", "port") of a Host header; the port is "" when absent."""
    host = host.strip().lower()
    if host.startswith("["):  # IPv6 literal: [::1]:8000
        name, _, rest = host.partition("]")
        return name + "]", rest[1:] if rest.startswith(":") else ""
    name, _, port = host.partition(":")
    return name, port


class OriginGuard:
    """ASGI middleware applying an OriginPolicy to every HTTP and WebSocket request."""

    def __init__(self, app: ASGIApp, policy: OriginPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Callable, send: Callable) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            refusal = self.refusal(scope, headers)
            if refusal is not None:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await refusal(scope, receive, send)
                return
            origin = headers.get("origin")
            if scope["type"] == "http" and origin is not None and origin not in self.policy.cors_origins:
                send = _without_cors(send)
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope, headers: dict[str, str]) -> Any:
        """The error response for a request this server must not serve, or None (`headers` by lower-case name)."""
        host = headers.get("host", "")
        path = scope.get("path", "")
        if not self.policy.host_ok(host):
            return error_response(403, f"this server answers only to its own address (127.0.0.1 or localhost), "
                                  f"not to the host name {host[:80]!r}; open it by that address.",
                                  kind="permission_error", code="host_not_allowed", path=path)
        method = scope.get("method", "GET")
        if method in SAFE_METHODS and scope["type"] == "http":
            return None
        origin = headers.get("origin")
        fetch_site = headers.get("sec-fetch-site")
        from_elsewhere = (origin is not None and not self.policy.origin_ok(origin, host)) or (
            fetch_site is not None and fetch_site not in _SAME and origin not in self.policy.cors_origins)
        if from_elsewhere:
            return error_response(403, f"a page from another site ({(origin or fetch_site or '')[:80]}) may not "
                                  "use this server; to allow a web app, start localchat with --cors-origin "
                                  "ITS_ORIGIN.", kind="permission_error", code="cross_site_request", path=path)
        if scope["type"] == "http" and method == "POST" and path.startswith(("/v1/", "/api/")):
            kind = headers.get("content-type", "").split(";")[0].strip().lower()
            no_browser = not any(name in headers for name in _BROWSER_MARKS)
            if kind != "application/json" and not (path.startswith("/api/") and no_browser and kind in _PROGRAM_FORMS):
                return error_response(415, f"the request body must be JSON, sent with 'Content-Type: "
                                      f"application/json' (got {kind or 'none'!r}).", code="unsupported_media_type",
                                      path=path)
        return None


def _without_cors(send: Callable) -> Callable:
    """`send` with every Access-Control-* header dropped from the response: no origin is allowed by it."""
    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [(k, v) for k, v in message.get("headers", [])
                                              if not k.lower().startswith(b"access-control-")]}
        await send(message)
    return sending


def install(app: Any, policy: OriginPolicy) -> None:
    """Put the guard (outermost) and, when origins are named, CORS for them in front of a Starlette app."""
    if policy.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(policy.cors_origins),
                           allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
                           # Anthropic's browser clients send their key and version in headers of their own.
                           allow_headers=["authorization", "content-type", "x-api-key", "anthropic-version",
                                          "anthropic-beta", "anthropic-dangerous-direct-browser-access"])
    app.add_middleware(OriginGuard, policy=policy)  # added last: runs first
