"""The ``service`` process: the control plane's app on core's HTTP server stack, until it is told to stop."""

from __future__ import annotations

from typing import TYPE_CHECKING

from the_loop import events, toolkit

if TYPE_CHECKING:
    from the_loop.interfaces import ServiceContext


def run_service(ctx: ServiceContext) -> None:
    from the_loop_web.app import build_app

    settings = ctx.config.section("service")
    app = build_app(ctx.config, ctx.latest)
    tls = (settings.tls.cert_file, settings.tls.key_file) if settings.tls.enabled else None

    def announce(host: str, port: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        events.emit("web.started", url=f"{settings.scheme}://{shown}:{port}", tls=tls is not None)

    try:
        toolkit.serve_http(
            ctx,
            app,
            host=settings.host,
            port=settings.port,
            max_concurrency=settings.max_concurrency,
            announce=announce,
            tls=tls,
            websockets=True,
        )
    finally:
        events.emit("web.stopped", host=settings.host, port=settings.port)
