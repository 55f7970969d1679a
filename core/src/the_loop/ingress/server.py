"""Core's one HTTP server: ``/health`` plus one route per webhook ingress, served by uvicorn.

``webhooks.ghWebhook.{host,port}`` say where it listens (decision 13; the key keeps the reference's name). The
request path is kept short and bounded: the body is capped (``maxBodyBytes``, on ``Content-Length`` and again
while streaming), its read is timed out (``requestTimeoutSeconds`` → 408), concurrency is capped
(``maxConcurrency`` → 503), and an ingress's ``handle`` — synchronous, writing to the durable inbox before it
answers — runs on a worker thread. Connections are HTTP/1.1 keep-alive. Malformed requests get a 4xx, never a
5xx. uvicorn and Starlette are imported here only, so the CLI never pays for them.

Before a request reaches the app, :class:`GuardedProtocol` bounds what a client can hold (uvicorn's own parser
bounds none of it): a request's head (request line and headers) may be at most :data:`MAX_HEAD_BYTES` and
:data:`MAX_HEADERS` headers (→ 431), and must arrive within :data:`HEAD_TIMEOUT_SECONDS` of its first byte or of
the connection opening (→ 408); one peer address may hold at most half of ``maxConcurrency`` connections (→ 503,
so silent sockets from one place never starve everyone else's deliveries). Every refusal is a ``server.rejected``
line naming its reason.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from the_loop import events
from the_loop.interfaces import PEER_HEADER, WebhookIngress

if TYPE_CHECKING:
    from the_loop.interfaces import ServiceContext

BODY_METHODS = ("POST", "PUT", "PATCH")
GRACEFUL_SHUTDOWN_SECONDS = 10
KEEP_ALIVE_SECONDS = 5
MAX_HEADERS = 100
MAX_HEAD_BYTES = 64 * 1024
HEAD_TIMEOUT_SECONDS = 5.0


class BodyTooLarge(Exception):
    pass


def _reject(request: Request, status: int, reason: str, *, close: bool = False) -> JSONResponse:
    events.emit(
        "server.rejected",
        level="warning",
        status=status,
        method=request.method,
        path=request.url.path[:200],
        reason=reason,
    )
    headers = {"connection": "close"} if close else None
    return JSONResponse({"status": reason}, status_code=status, headers=headers)


async def _read_capped(request: Request, cap: int) -> bytes:
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


async def read_body(request: Request, cap: int, timeout: float) -> bytes | Response:
    """The request body, or the 4xx response that refuses it."""
    length = request.headers.get("content-length")
    if length is None:
        if request.method in BODY_METHODS or "transfer-encoding" in request.headers:
            return _reject(request, 411, "length required", close=True)
        return b""
    if not length.isdigit():
        return _reject(request, 400, "invalid content-length", close=True)
    if int(length) > cap:
        return _reject(request, 413, "body too large", close=True)
    try:
        return await asyncio.wait_for(_read_capped(request, cap), timeout)
    except BodyTooLarge:
        return _reject(request, 413, "body too large", close=True)
    except TimeoutError:
        return _reject(request, 408, "request body timeout", close=True)
    except ClientDisconnect:
        return _reject(request, 400, "client disconnected", close=True)


def ingress_endpoint(ingress: WebhookIngress, cap: int, timeout: float) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        body = await read_body(request, cap, timeout)
        if isinstance(body, Response):
            return body
        try:
            headers = {key: value for key, value in request.headers.items() if key != PEER_HEADER}
            headers[PEER_HEADER] = request.client.host if request.client else ""
            answer = await run_in_threadpool(ingress.handle, headers, body)
        except Exception as exc:  # an ingress bug, not the client's fault
            events.emit(
                "server.rejected",
                level="error",
                status=500,
                path=ingress.path,
                ingress=ingress.name,
                error=f"{type(exc).__name__}: {exc}",
            )
            return JSONResponse({"status": "error"}, status_code=500)
        return JSONResponse(dict(answer.body), status_code=answer.status)

    return endpoint


async def health(_request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def _not_found(request: Request, _exc: Exception) -> Response:
    return _reject(request, 404, "not found")


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 400
    return _reject(request, status, "method not allowed" if status == 405 else "bad request")


def build_app(ingresses: list[WebhookIngress], *, max_body_bytes: int, read_timeout: float) -> Starlette:
    """The Starlette app: ``GET /health`` and each ingress's route (first one wins a path; /health is core's)."""
    routes = [Route("/health", health, methods=["GET", "HEAD"])]
    taken = {"/health": "core"}
    for ingress in ingresses:
        if ingress.path in taken:
            events.emit(
                "server.rejected",
                level="warning",
                reason="route taken",
                path=ingress.path,
                ingress=ingress.name,
                holder=taken[ingress.path],
            )
            continue
        taken[ingress.path] = ingress.name
        endpoint = ingress_endpoint(ingress, max_body_bytes, read_timeout)
        # A trailing slash on either side is the same route (H1); a redirect would count as a failed delivery.
        base = ingress.path.rstrip("/") or "/"
        for path in dict.fromkeys((base, f"{base.rstrip('/')}/")):
            routes.append(Route(path, endpoint, methods=list(ingress.methods), name=f"{ingress.name}:{path}"))
    app = Starlette(routes=routes, exception_handlers={404: _not_found, HTTPException: _http_error})
    app.router.redirect_slashes = False
    return app


def bind(host: str, port: int) -> socket.socket:
    """Listen on ``host:port`` ourselves, so a taken port is one clear error before uvicorn starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio turns Nagle off only on sockets that say they are TCP, and with Nagle on
    # a response's head and body wait out the client's delayed ACK (≈40 ms per request).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock


async def serve(
    server: uvicorn.Server, sock: socket.socket, ctx: ServiceContext, announce: Callable[[str, int], None]
) -> None:
    """Serve until ``ctx.should_stop()`` (polled every 0.1 s), or right after start-up when ``ctx.once``;
    ``announce(host, port)`` once the server listens."""

    async def watch() -> None:
        announced = False
        while not server.should_exit:
            if server.started and not announced:
                announced = True
                host, port = sock.getsockname()[:2]
                announce(host, port)
            if ctx.should_stop() or (ctx.once and server.started):
                server.should_exit = True
            await asyncio.sleep(0.1)

    watcher = asyncio.create_task(watch())
    try:
        await server.serve(sockets=[sock])
    finally:
        watcher.cancel()


def _run_loop(main: Any) -> None:
    """Run the server on uvloop when it is installed (a faster event loop), else on asyncio's own."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


def _refusal(status: int, reason: str) -> bytes:
    body = json.dumps({"status": reason}).encode()
    head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
    return (head + "connection: close\r\n\r\n").encode() + body


def guarded_protocol(max_per_peer: int) -> type[Any]:
    """uvicorn's httptools protocol with the head limits, the head timeout and the per-peer cap (see above)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    peers: dict[str, int] = {}

    class GuardedProtocol(HttpToolsProtocol):  # type: ignore[misc]
        _peer = ""
        _counted = False
        _refused = False
        _in_head = True  # bytes arriving now belong to a request head
        _head_bytes = 0  # raw bytes received while the head is open (a head that never ends)
        _head_count = 0
        _head_size = 0  # the parsed head: request target and headers
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._peer = self.client[0] if self.client else ""
            if peers.get(self._peer, 0) >= max_per_peer:
                return self._refuse(503, "too many connections from one peer")
            peers[self._peer] = peers.get(self._peer, 0) + 1
            self._counted = True
            self._start_head_timer()  # a connection that never sends a byte is closed too

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_head_timer()
            if self._counted:
                self._counted = False
                left = peers.get(self._peer, 1) - 1
                if left > 0:
                    peers[self._peer] = left
                else:
                    peers.pop(self._peer, None)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if self._in_head:
                self._head_bytes += len(data)
                if self._head_timer is None:
                    self._start_head_timer()
            super().data_received(data)
            # Judged after the parser saw the chunk: one that also ends the head (and carries body) resets the
            # count, so only a head still open past the cap is refused.
            if self._in_head and not self._refused and self._head_bytes > MAX_HEAD_BYTES:
                self._refuse(431, "request head too large")

        # The parser goes on through the chunk it was fed after a refusal: every callback then does nothing.
        def on_header(self, name: bytes, value: bytes) -> None:
            if self._refused:
                return
            self._head_count += 1
            self._head_size += len(name) + len(value) + 4
            if self._head_count > MAX_HEADERS:
                return self._refuse(431, "too many request headers")
            if self._head_size > MAX_HEAD_BYTES:
                return self._refuse(431, "request head too large")
            super().on_header(name, value)

        def on_url(self, url: bytes) -> None:
            if self._refused:
                return
            self._head_size += len(url)
            if self._head_size > MAX_HEAD_BYTES:
                return self._refuse(431, "request head too large")
            super().on_url(url)

        def on_body(self, body: bytes) -> None:
            if not self._refused:
                super().on_body(body)

        def on_headers_complete(self) -> None:
            if self._refused:
                return
            self._stop_head_timer()
            self._in_head, self._head_bytes, self._head_count, self._head_size = False, 0, 0, 0
            if self.limit_concurrency is not None and (
                len(self.connections) >= self.limit_concurrency or len(self.tasks) >= self.limit_concurrency
            ):
                events.emit("server.rejected", level="warning", status=503, reason="concurrency limit")
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            if self._refused:
                return
            super().on_message_complete()
            self._in_head = True  # the next bytes on this connection start the next request's head

        def _start_head_timer(self) -> None:
            loop = asyncio.get_running_loop()
            self._head_timer = loop.call_later(HEAD_TIMEOUT_SECONDS, self._head_timed_out)

        def _stop_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self._in_head and not self._refused and self._head_bytes:
                self._refuse(408, "request head timeout")
            elif self._in_head and not self._refused:
                self._refuse(408, "idle connection")

        def _refuse(self, status: int, reason: str) -> None:
            self._refused = True
            self._stop_head_timer()
            events.emit("server.rejected", level="warning", status=status, reason=reason, peer=self._peer or None)
            if not self.transport.is_closing():
                self.transport.write(_refusal(status, reason))
                self.transport.close()

    return GuardedProtocol


def run_app(
    ctx: ServiceContext,
    app: Any,
    *,
    host: str,
    port: int,
    max_concurrency: int,
    announce: Callable[[str, int], None],
    tls: tuple[str, str] | None = None,
    websockets: bool = False,
) -> None:
    """Serve ``app`` on ``host:port`` until the service is told to stop: the one server stack of every HTTP
    service (the webhook receiver, the web control plane), with its guards, timeouts and graceful shutdown.
    ``tls`` is ``(certfile, keyfile)``; ``websockets`` serves WebSocket routes (through the ``websockets``
    package, which the service that asks for them depends on)."""
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            http=guarded_protocol(max(1, max_concurrency // 2)),
            lifespan="off",
            log_config=None,
            log_level="warning",
            access_log=False,
            server_header=False,
            limit_concurrency=max_concurrency,
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
            ssl_certfile=tls[0] if tls else None,
            ssl_keyfile=tls[1] if tls else None,
            ws="websockets-sansio" if websockets else "none",
        )
    )
    if tls:
        server.config.load()  # the certificate is read before the socket is taken: a bad one fails start-up
    sock = bind(host, port)
    try:
        _run_loop(serve(server, sock, ctx, announce))
    finally:
        sock.close()


def run_service(ctx: ServiceContext) -> None:
    """The ``gh-webhook`` service's target: core's HTTP server with every installed webhook ingress."""
    hook = ctx.config.core.webhooks.gh_webhook
    ingresses = [item for item in ctx.config.host.ingresses(ctx.config) if isinstance(item, WebhookIngress)]
    app = build_app(ingresses, max_body_bytes=hook.max_body_bytes, read_timeout=hook.request_timeout_seconds)
    routes = [route.path for route in app.routes if isinstance(route, Route)]

    def announce(host: str, port: int) -> None:
        events.emit(
            "server.started",
            host=host,
            port=port,
            routes=routes,
            path=hook.path,
            routing=ctx.config.core.routing.enabled,
            verifying_signatures=not hook.allow_unsigned,
        )

    try:
        run_app(ctx, app, host=hook.host, port=hook.port, max_concurrency=hook.max_concurrency, announce=announce)
    finally:
        events.emit("server.stopped", host=hook.host, port=hook.port)
