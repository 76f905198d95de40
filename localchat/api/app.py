"""`localchat serve`: the API (every protocol's routes) on its own FastAPI app, safe by default (loopback,
or a key)."""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import socket
import sys
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.requests import Request as HTTPRequest
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ..errors import AuthError, ConfigError
from ..runtime.sampling import SamplingParams
from .routes import Forwarder, build_router
from .service import Service
from .origins import LOOPBACK_NAMES, OriginPolicy, install
from .guard import check_key
from .wire import error_from, error_response

DEFAULT_PORT = 8000
PORT_TRIES = 100  # how far past the default port to look for a free one


@dataclass(slots=True)
class ServeOptions:
    """Where and how `serve` listens, and what answers."""

    host: str | None = None  # None: loopback, or every interface with --listen
    port: int | None = None  # None: DEFAULT_PORT or the next free one
    listen: bool = False
    api_key: str | None = None
    backend: str | None = None
    backend_key: str | None = None
    cors_origins: tuple[str, ...] = ()  # browser origins allowed to call the API (--cors-origin)
    sampling: SamplingParams | None = None  # what a request leaves out (the sampling flags); None: the defaults
    ollama_port: int | None = None  # a second listener, for apps that expect Ollama at its address (--ollama-port)

    def policy(self, port: int | None, *also: int) -> OriginPolicy:
        """Which Host names and browser origins the server on `port` (and the ports `also`) serves."""
        host = (self.host or "127.0.0.1").lower()
        bound = f"[{host.strip('[]')}]" if ":" in host else host  # as a browser writes it in Host
        names = tuple(dict.fromkeys((*LOOPBACK_NAMES, bound)))
        return OriginPolicy(names=names, port=port, any_host=self.listen, cors_origins=self.origins(),
                            also_ports=also)

    def origins(self) -> tuple[str, ...]:
        """The --cors-origin values, checked: each one scheme://host[:port], nothing more."""
        for origin in self.cors_origins:
            if origin == "*" or not origin.startswith(("http://", "https://")) or origin.rstrip("/").count("/") != 2:
                raise ConfigError(f"--cors-origin {origin!r} is not an origin; give one like http://localhost:3000 "
                                  "(scheme, host and port, no path).")
        return tuple(o.rstrip("/") for o in self.cors_origins)

    def bind_host(self) -> str:
        """The address to bind, after refusing any exposure the user did not ask for with a key."""
        host = self.host or ("0.0.0.0" if self.listen else "127.0.0.1")
        for flag, port in (("--port", self.port), ("--ollama-port", self.ollama_port)):
            if port is not None and not 0 <= port <= 65535:
                raise ConfigError(f"{flag} {port} is not a port; use 1-65535 (0: any free port).")
        if self.api_key is not None and not self.api_key.strip():
            raise ConfigError("the API key is empty; set LOCALCHAT_API_KEY to a long random key (e.g. from "
                              "`openssl rand -hex 24`).")
        if not is_loopback(host) and not self.listen:
            raise ConfigError(f"--host {host} would expose the API beyond this machine; add --listen and set "
                              "LOCALCHAT_API_KEY if that is what you want.")
        self.origins()
        if self.listen and not self.api_key:
            raise ConfigError("--listen exposes the API to the network, so it needs a key: set LOCALCHAT_API_KEY "
                              "in the environment (--api-key shows it in the process list); clients then send "
                              "'Authorization: Bearer KEY'.")
        return host


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def bind_socket(host: str, port: int | None, default_port: int = DEFAULT_PORT) -> socket.socket:
    """A listening socket on `port`, or on the first free port from `default_port` when none is given."""
    candidates = [port] if port is not None else range(default_port, default_port + PORT_TRIES)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for candidate in candidates:
        sock = socket.socket(family, socket.SOCK_STREAM)
        if sys.platform != "win32":  # on Windows this flag lets two servers share a port
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host.strip("[]"), candidate))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE or getattr(exc, "winerror", None) == 10048:
                continue
            raise ConfigError(f"cannot listen on {host}:{candidate} ({exc.strerror or exc}); "
                              "choose another --host or --port.") from None
        sock.listen(128)
        sock.setblocking(False)
        return sock
    if port is not None:
        raise ConfigError(f"port {port} on {host} is in use; choose another with --port, or leave --port out "
                          "to take the next free one.")
    raise ConfigError(f"ports {default_port}-{default_port + PORT_TRIES - 1} on {host} are all in use; "
                      "choose one with --port.")


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = "127.0.0.1" if host == "0.0.0.0" else "::1" if host == "::" else host
    return f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"


def add_api(app: FastAPI, service: Service | Forwarder, api_key: str | None = None) -> None:
    """Put the API's routes (every protocol's) on an existing app (the UI's, or serve's own)."""
    app.include_router(build_router(service, api_key))


async def _invalid(request: HTTPRequest, exc: RequestValidationError) -> Response:
    first = exc.errors()[0] if exc.errors() else {}
    param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
    return error_response(400, f"{param or 'body'}: {first.get('msg', 'invalid request')}.", param=param)


class _McpEndpoint:
    """/mcp as an ASGI app: an MCP server (the SDK's MCPServer, Streamable HTTP) behind the API's key; the origin
    guard installed on the app covers it like every route."""

    def __init__(self, server: Any, api_key: str | None) -> None:
        from mcp.server.transport_security import TransportSecuritySettings

        # The app's own guard checks Host and Origin (and --listen's names); the SDK's copy of that check is off.
        server.streamable_http_app(stateless_http=True, json_response=True,
                                   transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        self.server, self.api_key = server, api_key

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            check_key(HTTPRequest(scope), self.api_key)
        except AuthError as exc:
            await error_from(exc, "/mcp")(scope, receive, send)
            return
        await self.server.session_manager.handle_request(scope, receive, send)


def create_app(service: Service | Forwarder, api_key: str | None = None,
               policy: OriginPolicy | None = None, mcp: Any = None) -> FastAPI:
    """The FastAPI app of `localchat serve`: the API alone, closing the service on shutdown; with `mcp` (an
    MCPServer: mcp_server.py), localchat's own MCP server at /mcp too."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with mcp.session_manager.run() if mcp is not None else contextlib.nullcontext():
            yield
        await service.aclose()

    # No interactive docs: they would be one more unauthenticated page on an exposed server.
    app = FastAPI(title="localchat", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    add_api(app, service, api_key)
    if mcp is not None:
        app.router.routes.insert(0, Route("/mcp", endpoint=_McpEndpoint(mcp, api_key),
                                          methods=["GET", "POST", "DELETE"]))
    # The router parses its own bodies, so FastAPI's 422 never comes from it; any route added
    # to this app later still answers a bad body like OpenAI does, with a 400.
    app.add_exception_handler(RequestValidationError, _invalid)

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def root() -> Response:  # what apps that look for a local server ask first (Ollama's answers too)
        return PlainTextResponse("localchat is running: OpenAI's API at /v1, Anthropic's at /v1/messages, "
                                 "Ollama's at /api.")

    install(app, policy or OriginPolicy())
    return app


def serve(options: ServeOptions, engine: Any = None, model_name: str = "", system_prompt: str = "",
          runners: Any = None, thinking_budget: int = 0, mcp_of: Callable[[Service], Any] | None = None) -> int:
    """Run the API until interrupted; prints the URL once the socket is bound. `system_prompt`: the
    system turn a local model's chat request gets when it brings none (--system-prompt); `runners`: the
    models loaded by name beside it (runners/pool.py); `mcp_of(service)`: the MCP server served at /mcp."""
    import uvicorn

    from .local import LocalService
    from .proxy import ProxyService

    host = options.bind_host()
    if options.backend:
        service: Service | Forwarder = ProxyService(options.backend, options.backend_key,
                                                    forward_client_auth=not options.api_key)
        what = f"forwarding to {service.base}"
    else:
        service = LocalService(engine, model_name, options.sampling, system_prompt, runners, thinking_budget)
        what = f"model {model_name} ({getattr(engine, 'placement', 'one worker')})"
    sockets = [bind_socket(host, options.port)]
    if options.ollama_port is not None:  # the same app, the same guards, on the same host
        sockets.append(bind_socket(host, options.ollama_port))
    url = url_of(sockets[0])
    exposed = "" if is_loopback(host) else f" (listening on {host}; clients need the API key)"
    also = f" (and at {url_of(sockets[1])}/api)" if len(sockets) > 1 else ""
    at_mcp = f", MCP at {url}/mcp" if mcp_of is not None and not options.backend else ""
    print(f"localchat: OpenAI-compatible API at {url}/v1, {what}{exposed}; Anthropic's Messages at /v1/messages, "
          f"Ollama's API at /api{also}{at_mcp}. Ctrl-C stops.", flush=True)
    # A stream left open by a client must not hold Ctrl-C hostage for long.
    mcp = mcp_of(service) if mcp_of is not None and not options.backend else None
    app = create_app(service, options.api_key, options.policy(*(s.getsockname()[1] for s in sockets)), mcp)
    config = uvicorn.Config(app, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=5)
    uvicorn.Server(config).run(sockets=sockets)
    return 0
